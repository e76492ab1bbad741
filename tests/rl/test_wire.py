"""Bounds on a generator's answer (issue 39, item 6): what neither engine can produce is refused, counted, told.

TorchGenerator (generate.sample) and vLLM (vllm_engine: ``allowed_token_ids``, ``ignore_eos``, ``stop_token_ids``)
sample only allowed tokens, write exactly ``max_tokens`` of them unless an end-of-sequence id ends a completion early (vLLM
also at the end of its context), and stamp one version per call: the one the generator held when it asked.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any

import pytest
import torch
from trainer.config import Model, compose
from trainer.model.transformer import LanguageModel
from trainer.rl import generator_main
from trainer.rl.controller import Controller
from trainer.rl.engines import Engine
from trainer.rl.episode import Completion, Group, make_batch
from trainer.rl.grpo import make_task
from trainer.rl.loss import Clip, grpo_loss
from trainer.rl.report import StepReport, step_line
from trainer.rl.service import RequestFailed
from trainer.rl.settings import RL
from trainer.rl.step import StepSettings, rl_step
from trainer.rl.tokens import DIGITS, allowed_mask
from trainer.rl.wire import MIN_LOGPROB, Refused

from contract.problem import Invalid
from tests.conftest import REPO
from tests.rl.test_controller import SETTINGS, Clock, answer, started

THREE = dataclasses.replace(SETTINGS, max_tokens=3)


def controller(settings: RL = SETTINGS, *, context: int | None = None, ends: tuple[int, ...] = ()) -> Controller:
    task = dataclasses.replace(make_task(settings, 256), ends=ends)
    return Controller(settings, task, vocab=256, steps=10, clock=Clock(), context=context)


def with_responses(c: Controller, lease: dict[str, Any], version: int, make: Any) -> dict[str, Any]:
    """An answer whose completion j of prompt ``tokens`` is ``make(tokens, j)`` (logprobs -0.5 each)."""
    groups = [
        {"index": index, "completions": [
            {"response": make(tokens, j), "logprobs": [-0.5] * len(make(tokens, j)), "version": version}
            for j in range(c.settings.group_size)
        ]}
        for index, tokens in lease["prompts"]
    ]  # fmt: skip
    return {"lease": lease["lease"], "groups": groups}


def accepted(c: Controller, generator: str, data: dict[str, Any]) -> None:
    """Taken (scored; kept or dropped by its rewards), not refused."""
    before = c.window.refused
    c.result(generator, data)
    assert c.window.refused == before


def refused(c: Controller, generator: str, data: dict[str, Any], reason: str, says: str) -> Refused:
    with pytest.raises(Refused, match=says) as caught:
        c.result(generator, data)
    assert caught.value.reason == reason
    return caught.value


def test_a_token_outside_the_allowed_set_is_refused() -> None:
    """rl.allowed=digits: both engines mask every other token, so the trainer's recompute gives it -inf, and at
    kl_beta > 0 the step is NaN (measured: loss nan, not applied); at beta 0 its gradient is silently 0."""
    c = controller()
    started(c)
    forged = answer(c, c.lease("g", 0), 0)
    forged["groups"][0]["completions"][0]["response"] = [ord("a")]
    refused(c, "g", forged, "token", "outside the allowed tokens")


def test_a_completion_is_exactly_max_tokens_long_without_an_end_token() -> None:
    """No end-of-sequence id (byte tokens have none): every completion is max_tokens long."""
    c = controller(THREE)
    started(c)
    short = with_responses(c, c.lease("g", 0), 0, lambda p, j: [48 + j])
    refused(c, "g", short, "length", "1 tokens")
    full = with_responses(c, c.lease("g", 0), 0, lambda p, j: [48 + j, 49, 50])
    accepted(c, "g", full)


def test_vllms_context_may_end_a_completion_early() -> None:
    """vLLM stops at max_model_len (the run's model.seq_len); TorchGenerator does not: both lengths are possible."""
    c = controller(THREE, context=6)
    started(c)
    lease = c.lease("g", 0)
    capped = with_responses(c, lease, 0, lambda p, j: [48 + j] * max(1, min(3, 6 - len(p))))
    accepted(c, "g", capped)
    lease = c.lease("g", 0)
    too_short = with_responses(c, lease, 0, lambda p, j: [48 + j])
    if all(6 - len(p) <= 1 for _, p in lease["prompts"]):
        pytest.fail("the prompts leased are all too long for this test's context")
    refused(c, "g", too_short, "length", "tokens")


def test_an_end_token_ends_a_completion_and_only_at_its_end() -> None:
    nine = ord("9")
    c = controller(THREE, ends=(nine,))
    started(c)
    stopped = with_responses(c, c.lease("g", 0), 0, lambda p, j: [48 + j, nine])
    accepted(c, "g", stopped)
    unstopped = with_responses(c, c.lease("g", 0), 0, lambda p, j: [48 + j, 49])
    refused(c, "g", unstopped, "length", "tokens")
    inside = with_responses(c, c.lease("g", 0), 0, lambda p, j: [nine, 48 + j, 49])
    refused(c, "g", inside, "length", "end token 57 before the end")


def test_a_completion_carries_the_version_its_generator_held_when_leased() -> None:
    """One generate call, one version: a generator that held 0 claiming 1 would make stale samples look fresh."""
    c = controller()
    c.start(0, "t0", 1, None)
    c.group_gone(0)  # nobody serves version 1: a generator holding 0 is leased (age 1 is within the bound)
    lease = c.lease("g", 0)
    assert "lease" in lease
    refused(c, "g", answer(c, lease, 1), "version", "held version 0")
    lease = c.lease("g", 1)
    mixed = answer(c, lease, 1)
    mixed["groups"][0]["completions"][1]["version"] = 0
    refused(c, "g", mixed, "version", "held version 1")


def test_refusals_are_counted_per_generator_and_reason_and_in_the_steps_window() -> None:
    c = controller()
    started(c)
    for _ in range(2):
        forged = answer(c, c.lease("g", 0), 0)
        forged["groups"][0]["completions"][0]["logprobs"] = [float("inf")]
        error = refused(c, "g", forged, "logprob", "logprob")
    assert (error.generator, error.count) == ("g", 2)
    stranger = refused(c, "someone", {"lease": 12345, "groups": []}, "lease", "not one it holds")
    assert stranger.generator == "other"  # a name that never asked for work is not a series of its own
    assert c.refusals == {("g", "logprob"): 2, ("other", "lease"): 1}
    assert c.window.refused == 3
    assert "refused 3" in step_line(StepReport(
        step=1, steps=2, reward=0.0, version=0, ages=(0,), generated_tokens=0, trained_tokens=0,
        generate_seconds=0.0, train_seconds=0.0, sync_seconds=0.0, refused=3,
    ))  # fmt: skip


class Scripted:
    """The controller as a generator sees it: a lease, a refusal of its answer, then done."""

    def __init__(self) -> None:
        self.answers: list[dict[str, Any]] = [{"lease": 3, "prompts": [[4, [49, 43, 50, 61]]], "store": 1},
                                              {"done": True}]  # fmt: skip

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path == "/result":
            raise RequestFailed("/result: 400", reason="token")
        return self.answers.pop(0)


class OneToken:
    version = 0

    def generate(self, prompts: Any, n: int, **kwargs: Any) -> list[list[Completion]]:
        return [[Completion(prompt=tuple(p), response=(48,), logprobs=(-0.5,), version=0)] * n for p in prompts]


class Held:
    members, held = 1, 0


def test_the_generator_logs_why_its_answer_was_refused(caplog: pytest.LogCaptureFixture) -> None:
    cfg = compose(REPO / "platform/trainer/configs/grpo.yaml", ["run.name=x", "rl.group_size=2"])
    engine = Engine(generator=OneToken(), receiver=Held())  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="trainer.rl"):
        assert generator_main.serve(cfg, "generator-0.0", engine, Scripted()) == 0  # type: ignore[arg-type]
    assert "generator-0.0: answer to lease 3 refused (token, 1 in a row)" in caplog.text


def test_a_logprob_at_the_floor_leaves_the_step_finite(tiny: Model) -> None:
    """The floor alone did not stop the issue's attack: a digit the policy gives ~0.1, claimed at MIN_LOGPROB with a
    negative advantage, is a ratio of ~e^85 and the gradient norm was inf (measured before the dual clip: the step
    skipped, as every step with such an answer in it would be)."""
    torch.manual_seed(0)
    model = LanguageModel(tiny)
    prompt = (49, 43, 50, 61)
    forged = Completion(prompt=prompt, response=(51,), logprobs=(MIN_LOGPROB,), version=0)
    honest = Completion(prompt=prompt, response=(48,), logprobs=(-2.3,), version=0)
    batch = make_batch(
        [Group(prompt_index=0, completions=(forged, honest), rewards=(0.0, 1.0), advantages=(-0.7, 0.7))]
    )
    stats = rl_step(
        model, torch.optim.AdamW(model.parameters()), batch, StepSettings(allowed=allowed_mask(256, DIGITS))
    )
    assert stats.applied
    assert math.isfinite(stats.loss)
    assert math.isfinite(stats.grad_norm)


def test_a_negative_advantage_loses_at_most_dual_times_its_size_with_no_gradient_past_it() -> None:
    """Dual-clip PPO (Ye et al. 2020, arXiv:1912.09729; verl's ``clip_ratio_c`` 3.0): past ``dual`` the ratio of a
    token with A < 0 no longer moves the loss, however large a generator's claimed logprob makes it."""
    clip = Clip()
    logprobs = torch.tensor([[0.0]], requires_grad=True)
    parts = grpo_loss(logprobs, torch.tensor([[MIN_LOGPROB]]), torch.tensor([-1.0]), torch.tensor([[True]]), clip=clip)
    parts.loss.backward()  # type: ignore[no-untyped-call]
    assert float(parts.loss.detach()) == pytest.approx(clip.dual)
    assert logprobs.grad is not None
    assert float(logprobs.grad) == 0.0


def test_a_sent_batch_counts_the_whole_batch_and_refuses_one_it_cannot_count() -> None:
    from trainer.rl.wire import group_from_json, group_to_json, sent_batch

    def group(i: int) -> Group:
        completion = Completion(prompt=(1, 2), response=(3,) * (i + 1), logprobs=(-0.5,) * (i + 1), version=0)
        return Group(prompt_index=i, rewards=(1.0, 0.0), advantages=(0.7, -0.7), completions=(completion,) * 2)

    groups = [group(i) for i in range(3)]
    sent = sent_batch([group_to_json(g) for g in groups])
    assert (sent.sequences, sent.tokens) == (6, 2 * (1 + 2 + 3))  # what loss.Aggregation weighs every share by
    assert [group_from_json(g) for g in sent.groups] == groups  # a rank rebuilds only its share, unchanged
    assert all(g["prompt"] == [1, 2] and "prompt" not in g["completions"][0] for g in sent.groups)  # sent once
    with pytest.raises(Invalid, match="a group is malformed"):
        sent_batch([{"completions": [{"prompt": [1]}]}])
    with pytest.raises(Invalid, match="a group is malformed"):
        group_from_json({k: v for k, v in group_to_json(groups[0]).items() if k != "prompt"})
    other = Completion(prompt=(1, 3), response=(3,), logprobs=(-0.5,), version=0)
    mixed = Group(
        prompt_index=0, rewards=(1.0, 0.0), advantages=(0.7, -0.7), completions=(groups[0].completions[0], other)
    )
    with pytest.raises(ValueError, match="answer different prompts"):
        group_to_json(mixed)


def test_a_batch_is_right_padded_with_each_logprob_at_its_tokens_target_position() -> None:
    short = Completion(prompt=(5, 6), response=(7,), logprobs=(-0.5,), version=0)
    long = Completion(prompt=(5, 6, 8), response=(9, 4), logprobs=(-0.25, -0.75), version=1)
    batch = make_batch([Group(prompt_index=3, rewards=(1.0, 0.0), advantages=(1.0, -1.0), completions=(short, long))])
    assert batch.tokens.tolist() == [[5, 6, 7, 0, 0], [5, 6, 8, 9, 4]]
    assert batch.sampler_logprobs.tolist() == [[0.0, -0.5, 0.0, 0.0], [0.0, 0.0, -0.25, -0.75]]
    assert batch.mask.tolist() == [[False, True, False, False], [False, False, True, True]]
    assert batch.advantages.tolist() == [1.0, -1.0]
    assert batch.versions.tolist() == [0, 1]
