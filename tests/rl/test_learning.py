"""THE learning test: GRPO teaches the `tiny` model the arithmetic task, measured greedily on held-out prompts.

The setting (configs/rl/arithmetic.yaml and the loop's defaults, trainer.rl.loop.Loop) was chosen for reliability over speed; README "The learning
test" has the seeds tried and what each reached. One intra-op thread (conftest): on shared cores a
second one mostly spins. Deterministic on CPU: the same seed gives the same run.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
import yaml
from trainer.config import Model
from trainer.rl.grpo import Task, make_task
from trainer.rl.loop import Loop, run
from trainer.rl.rewards import Rewards, exact
from trainer.rl.settings import RL, from_dict

from tests.conftest import REPO

pytestmark = pytest.mark.live  # GRPO learning runs, in process

SETTINGS = from_dict(yaml.safe_load((REPO / "platform/trainer/configs/rl/arithmetic.yaml").read_text()))


def test_tiny_learns_arithmetic(tiny: Model) -> None:
    history = run(tiny, SETTINGS)
    (_, before), (_, after) = history.greedy[0], history.greedy[-1]
    assert before <= 0.3, history.greedy
    assert after >= 0.8, history.greedy
    # Sampled by the current weights, or the surplus of the previous step's rollouts: never older than the bound.
    assert max(age for ages in history.ages for age in ages) <= SETTINGS.max_policy_age
    assert history.counters.age_violations == 0


def test_tiny_learns_from_samples_one_version_stale(tiny: Model) -> None:
    history = run(tiny, dataclasses.replace(SETTINGS, max_policy_age=1), loop=Loop(staleness=1))
    (_, before), (_, after) = history.greedy[0], history.greedy[-1]
    assert before <= 0.3, history.greedy
    assert after >= 0.8, history.greedy
    # The generator holds the weights of one version ago: after the first step every sample is exactly one version
    # old, and the surplus of a step's rollouts, two versions old by the next step, is evicted and counted.
    assert all(age == 1 for step in history.ages[1:] for age in step)
    assert history.counters.age_violations == 0
    assert history.counters.max_sampled_age == 1
    assert history.counters.dropped_stale > 0


SHORT = Loop(steps=4)


def _short(settings: RL, **changes: Any) -> RL:
    return dataclasses.replace(settings, eval_every=2, **changes)


def test_the_loop_is_deterministic_on_cpu(tiny: Model) -> None:
    runs = [run(tiny, _short(SETTINGS), loop=SHORT) for _ in range(2)]
    assert runs[0].rewards == runs[1].rewards
    assert runs[0].greedy == runs[1].greedy
    assert [s.loss for s in runs[0].steps] == [s.loss for s in runs[1].steps]


def test_a_reward_that_raises_is_counted_and_the_loop_goes_on(tiny: Model) -> None:
    calls = 0

    def flaky(prompt: str, completion: str, answer: str) -> float:
        nonlocal calls
        calls += 1
        if calls % 3 == 0:
            raise RuntimeError("verifier crashed")
        return exact(prompt, completion, answer)

    task = make_task(SETTINGS, tiny.vocab)
    task = Task(prompts=task.prompts, tokenizer=task.tokenizer, rewards=Rewards(flaky), allowed=task.allowed,
                max_tokens=task.max_tokens)  # fmt: skip
    history = run(tiny, _short(SETTINGS), task, loop=SHORT)
    assert len(history.steps) == 4
    assert all(s.applied for s in history.steps)
    assert history.reward_failures == calls // 3 > 0


def test_kl_needs_a_reference_model(tiny: Model) -> None:
    with pytest.raises(ValueError, match="reference"):
        run(tiny, _short(SETTINGS, kl_beta=0.1), loop=SHORT)
    assert torch.get_num_threads() == 1


def test_staleness_beyond_the_age_bound_is_refused(tiny: Model) -> None:
    """Every sample would be evicted: the loop refuses it before it starts."""
    with pytest.raises(ValueError, match="staleness 2 > max_policy_age 1"):
        run(tiny, _short(SETTINGS, max_policy_age=1), loop=Loop(steps=4, staleness=2))
