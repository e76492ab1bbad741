"""The controller's decisions, driven directly (no processes): leases, the age bound, batches, commits, failures."""

from __future__ import annotations

import json
from typing import Any

import pytest
from trainer.rl.controller import Controller
from trainer.rl.grpo import make_task
from trainer.rl.settings import RL
from trainer.rl.stats import Tally

from contract.problem import Invalid

SETTINGS = RL(group_size=2, prompts_per_step=2, lease_prompts=2, buffer_batches=2, max_policy_age=1, held_out=4)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def controller(settings: RL = SETTINGS, steps: int = 10, clock: Clock | None = None) -> Controller:
    return Controller(settings, make_task(settings, 256), vocab=256, steps=steps, clock=clock or Clock())


def answer(c: Controller, lease: dict[str, Any], version: int, correct: bool = True) -> dict[str, Any]:
    """A generator's answer: for each prompt one right and one wrong completion (rewards differ: kept)."""
    groups = []
    for index, _ in lease["prompts"]:
        right = ord(c.task.prompts[index].answer[0])
        wrong = ord("0") if right != ord("0") else ord("1")
        first = right if correct else wrong
        groups.append({"index": index, "completions": [
            {"response": [first], "logprobs": [-0.5], "version": version},
            {"response": [wrong], "logprobs": [-0.7], "version": version},
        ]})  # fmt: skip
    return {"lease": lease["lease"], "groups": groups}


def started(c: Controller, step: int = 0, state: str | None = None) -> None:
    c.start(0, "t0", step, state)


def fill(c: Controller, generator: str, version: int) -> None:
    lease = c.lease(generator, version)
    assert "lease" in lease, lease
    assert c.result(generator, answer(c, lease, version)) == len(lease["prompts"])


def test_nothing_happens_before_a_trainer_group_starts() -> None:
    c = controller()
    assert c.lease("g", -1) == {"wait": 0.2}
    assert c.batch(0) is None


def test_a_generator_without_weights_is_sent_the_starting_version_first() -> None:
    c = controller()
    started(c)
    sync = c.lease("g", -1)["sync"]
    assert sync["group"] == 0
    assert sync["version"] == 0
    assert sync["world"] == 2  # the sender and the generator's one process
    assert c.transfers(0, "t0") == [{"pair": sync["pair"], "generator": "g", "world": 2}]
    assert c.transfers(0, "t0") == []  # each transfer once
    assert "lease" in c.lease("g", 0)


def test_a_pair_spans_the_sender_and_every_process_the_generator_receives_in() -> None:
    c = controller()
    started(c)
    sync = c.lease("vllm", -1, members=4)["sync"]  # a vLLM engine at tensor parallel 4
    assert sync["world"] == 5
    assert c.transfers(0, "t0") == [{"pair": sync["pair"], "generator": "vllm", "world": 5}]
    assert c.lease("torch", -1)["sync"]["world"] == 2  # another generator: its own size
    c.generator_gone("vllm")
    assert "vllm" not in c.members


def test_the_batch_is_formed_once_and_every_group_and_retry_gets_the_same() -> None:
    c = controller()
    started(c)
    fill(c, "g", 0)
    first, again = c.batch(0), c.batch(0)
    assert first is not None
    assert first == again
    assert [g["index"] for g in first["groups"]] == [0, 1]
    state = json.loads(first["state"])
    assert state["cursor"] == 2
    assert state["pending"] == []
    assert state["counters"]["trained"] == 2


def test_the_state_a_batch_brings_lists_what_was_issued_and_not_trained() -> None:
    c = controller()
    started(c)
    fill(c, "g", 0)
    outstanding = c.lease("h", 0)["prompts"]  # issued, unanswered
    formed = c.batch(0)
    assert formed is not None
    assert json.loads(formed["state"])["pending"] == sorted(i for i, _ in outstanding)


def test_generators_wait_when_their_samples_would_be_too_old_and_are_synced() -> None:
    c = controller()
    started(c)
    fill(c, "g", 0)
    assert c.batch(0) is not None
    answer_, _ = c.committed(0, 1, {})
    assert answer_ == {"evaluates": True, "version": 1}
    assert c.lease("g", 0)["sync"]["version"] == 1  # a newer version exists: take it first
    c.serving.clear()  # no group holds a snapshot (all dead): nobody to sync from
    fill(c, "g", 0)  # one version behind: within max_policy_age 1, it generates
    c.batch(1)
    c.committed(0, 2, {})
    c.serving.clear()
    assert c.lease("g", 0) == {"wait": 0.2}  # two behind: its samples would be evicted, it waits
    assert "lease" in c.lease("g", 1)


def test_no_group_older_than_the_bound_is_ever_in_a_batch() -> None:
    c = controller(steps=50)
    started(c)
    for step in range(6):
        c.serving.clear()  # keep generators on old weights as long as the bound allows
        held = max(0, step - 1)
        while (formed := c.batch(step)) is None:
            fill(c, f"g{step}", held)
        ages = [step - min(x["version"] for x in g["completions"]) for g in formed["groups"]]
        assert max(ages) <= 1
        c.committed(0, step + 1, {})
    assert c.buffer.counters.age_violations == 0


def test_a_dead_generators_prompts_are_issued_again_first() -> None:
    c = controller()
    started(c)
    lease = c.lease("g", 0)
    lost = [i for i, _ in lease["prompts"]]
    assert c.generator_gone("g") == len(lost)
    assert [i for i, _ in c.lease("h", 0)["prompts"]] == lost
    assert c.buffer.counters.reissued == len(lost)
    with pytest.raises(Invalid, match="not one it holds"):  # its late answer is refused
        c.result("g", answer(c, lease, 0))


def test_an_expired_lease_is_issued_again() -> None:
    clock = Clock()
    c = controller(clock=clock)
    started(c)
    lease = c.lease("g", 0)
    clock.now = SETTINGS.lease_timeout_s + 1
    again = c.lease("h", 0)
    assert [i for i, _ in again["prompts"]] == [i for i, _ in lease["prompts"]]


@pytest.mark.parametrize(
    ("forge", "message"),
    [
        (lambda a: a["groups"].pop(), "groups for a lease"),
        (lambda a: a["groups"][0]["completions"].pop(), "completions, the run samples 2"),
        (lambda a: a["groups"][0]["completions"][0].update(response=[999]), "token id outside"),
        (lambda a: a["groups"][0]["completions"][0].update(logprobs=[float("nan")]), "logprob"),
        (lambda a: a["groups"][0]["completions"][0].update(logprobs=[0.5]), "logprob"),
        (lambda a: a["groups"][0]["completions"][0].update(logprobs=[-1e30]), "logprob outside"),
        (lambda a: a["groups"][0]["completions"][0].update(logprobs=[-87.4]), "logprob outside"),
        (lambda a: a["groups"][0]["completions"][0].update(logprobs=[True]), "logprob outside"),
        (lambda a: a["groups"][0]["completions"][0].update(version=7), "version 7 does not exist"),
        (lambda a: a["groups"][0].update(index=99), "was not leased"),
        (lambda a: a["groups"][0]["completions"][0].update(response=[48, 49]), "tokens"),
    ],
)
def test_a_forged_answer_is_refused_and_its_prompts_issued_again(forge: Any, message: str) -> None:
    c = controller()
    started(c)
    lease = c.lease("g", 0)
    forged = answer(c, lease, 0)
    forge(forged)
    with pytest.raises(Invalid, match=message):
        c.result("g", forged)
    assert c.rejected == 1
    assert [i for i, _ in c.lease("h", 0)["prompts"]] == [i for i, _ in lease["prompts"]]


def test_a_fresh_controller_resumes_the_prompt_stream_from_a_groups_checkpoint_state() -> None:
    c = controller()
    started(c)
    fill(c, "g", 0)
    c.lease("h", 0)  # outstanding when the checkpoint is taken
    formed = c.batch(0)
    assert formed is not None
    state = formed["state"]
    fresh = controller()
    fresh.start(1, "t1", 1, state)
    assert fresh.version == 1
    reissued = [i for i, _ in fresh.lease("g", 1)["prompts"]]
    assert reissued == json.loads(state)["pending"]
    assert fresh.buffer.cursor == json.loads(state)["cursor"]


def test_the_lowest_live_group_serves_weights_and_a_dead_one_none() -> None:
    c = controller()
    c.start(1, "t1", 0, None)
    c.start(0, "t0", 0, None)
    assert c.lease("g", -1)["sync"]["group"] == 0
    c.group_gone(0)
    assert c.lease("g", -1)["sync"]["group"] == 1
    assert c.transfers(0, "t0") == []  # a dead group's token serves nothing


def test_a_group_committing_without_the_lowest_serves_the_versions_it_commits() -> None:
    """CI, stop 50: group 0 registered but stuck short of the quorum while group 1 committed steps 1-3 alone. Only
    the lowest live group's commits were served, so no generator ever got versions 2 and 3, no batch within the age
    bound could form, and group 1 waited for it for ever."""
    c = controller(steps=20)
    assert c.start(1, "t1", 0, None) == {"version": 0, "baseline": True}  # the first group up evaluates step 0
    assert c.start(0, "t0", 0, None) == {"version": 0, "baseline": False}  # up, never in a quorum
    assert c.start(0, "t0", 0, None)["baseline"] is False  # restarted: the baseline is not evaluated again
    held = 0
    for step in range(3):
        while c.batch(step) is None:
            fill(c, "g", held)
        answer_, _ = c.committed(1, step + 1, {"participants": 1})
        assert answer_ == {"evaluates": True, "version": step + 1}  # the step's one evaluation: its first report
        sync = c.lease("g", held)["sync"]
        assert (sync["group"], sync["version"]) == (1, step + 1)  # the group that holds it serves it
        assert c.transfers(1, "t1") == [{"pair": sync["pair"], "generator": "g", "world": 2}]
        held = step + 1
    assert c.batch(3) is None
    fill(c, "g", held)  # generated at version 3: step 4's batch forms
    assert c.batch(3) is not None


def test_every_group_serves_what_it_committed_and_one_report_evaluates_a_step() -> None:
    c = controller()
    c.start(0, "t0", 0, None)
    c.start(1, "t1", 0, None)
    fill(c, "g", 0)
    assert c.batch(0) is not None
    assert c.committed(1, 1, {"participants": 2})[0] == {"evaluates": True, "version": 1}
    assert c.committed(0, 1, {"participants": 2})[0] == {"evaluates": False, "version": 1}
    assert c.serving == {0: 1, 1: 1}
    assert c.lease("g", 0)["sync"]["group"] == 0  # of the groups holding the newest, the lowest
    c.group_gone(0)
    assert c.lease("h", 0)["sync"]["group"] == 1


def test_the_run_is_done_at_its_last_step() -> None:
    c = controller(steps=1)
    started(c)
    fill(c, "g", 0)
    c.batch(0)
    _, ready = c.committed(0, 1, {"greedy": 0.5})
    (first,) = ready  # no quorum reported: one group's report completes the step
    assert first.step == 1
    assert first.ages == (0, 0)
    assert c.committed(1, 1, {})[1] == []  # the second group's report of the same step
    assert c.lease("g", 1) == {"done": True}


def _tally(tokens: int, clipped: int, ratio_max: float) -> dict[str, Any]:
    return Tally(tokens=tokens, clipped=clipped, ratio_sum=float(tokens), ratio_max=ratio_max, entropy_sum=0.5 * tokens,
                 kl_sampler_sum=0.01 * tokens).to_json()  # fmt: skip


def test_a_step_is_reported_over_every_groups_share_and_its_whole_batch() -> None:
    """Issue 41: trained tokens and the loss's statistics were one group's (half the batch with two groups)."""
    c = controller()
    c.start(0, "t0", 0, None)
    c.start(1, "t1", 0, None)
    fill(c, "g", 0)
    formed = c.batch(0)
    assert formed is not None
    responses = [len(x["response"]) for g in formed["groups"] for x in g["completions"]]
    _, ready = c.committed(1, 1, {"participants": 2, "tally": _tally(3, 3, 1.5)})
    assert ready == []  # the other group's share is still to come
    _, ready = c.committed(0, 1, {"participants": 2, "tally": _tally(1, 0, 2.5)})
    (step,) = ready
    assert step.lengths.tokens == sum(responses) == 4  # the whole batch: 2 groups x 2 completions x 1 token
    assert (step.lengths.mean, step.lengths.max, step.lengths.truncated) == (1.0, 1, 1.0)  # max_tokens 1, no stop
    assert step.policy is not None
    assert (step.policy.clip_fraction, step.policy.ratio_max, step.policy.shares, step.policy.tokens) == (
        3 / 4,
        2.5,
        2,
        4,
    )
    assert step.policy.entropy == pytest.approx(0.5)
    assert step.policy.kl_against == "sampler"
    assert step.policy.kl == pytest.approx(0.01)


def test_a_group_that_never_reports_leaves_its_step_to_the_next_commit() -> None:
    c = controller()
    c.start(0, "t0", 0, None)
    c.start(1, "t1", 0, None)
    fill(c, "g", 0)
    fill(c, "g", 0)
    assert c.batch(0) is not None
    assert c.committed(0, 1, {"participants": 2, "tally": _tally(4, 1, 1.2)})[1] == []
    c.group_gone(1)  # died between its commit and its report
    assert c.batch(1) is not None  # the second batch, within the age bound
    _, ready = c.committed(0, 2, {"participants": 1, "tally": _tally(4, 2, 1.1)})
    assert [(r.step, r.policy and (r.policy.shares, r.policy.expected)) for r in ready] == [(1, (1, 2)), (2, (1, 1))]
    assert c.flush() == []
