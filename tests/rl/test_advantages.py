from __future__ import annotations

import math

import pytest
from trainer.rl.advantages import EPS, normalize, score
from trainer.rl.episode import Completion


def completion(version: int = 0) -> Completion:
    return Completion(prompt=(1, 2), response=(3,), logprobs=(-0.5,), version=version)


def test_advantages_are_normalized_with_the_sample_std() -> None:
    rewards = [1.0, 0.0, 0.0, 1.0]
    std = math.sqrt(sum((r - 0.5) ** 2 for r in rewards) / 3)
    assert normalize(rewards) == pytest.approx([(r - 0.5) / (std + EPS) for r in rewards])
    assert sum(normalize([0.3, 0.9, 0.1])) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("rewards", [[1.0, 1.0, 1.0], [0.0, 0.0], [0.25]])
def test_equal_rewards_give_zero_advantages(rewards: list[float]) -> None:
    assert normalize(rewards) == (0.0,) * len(rewards)


def test_zero_std_groups_are_dropped_and_counted() -> None:
    groups = [[completion()] * 3 for _ in range(3)]
    scored = score([7, 8, 9], groups, [[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    assert [g.prompt_index for g in scored.kept] == [7]
    assert scored.dropped_zero_advantage == (8, 9)
    kept = scored.kept[0]
    assert kept.rewards == (1.0, 0.0, 1.0)
    assert kept.advantages == normalize([1.0, 0.0, 1.0])


def test_a_group_is_as_old_as_its_oldest_completion() -> None:
    # prime-rl's rule: a completion whose generation spanned an update carries its oldest version
    scored = score([0], [[completion(5), completion(3), completion(4)]], [[1.0, 0.0, 0.0]])
    assert scored.kept[0].version == 3
    assert scored.kept[0].age(4) == 1


def test_without_the_std_an_advantage_is_the_reward_less_the_groups_mean() -> None:
    """Dr. GRPO (rl.advantage_std=false): rewards 1, 0, 0, 0 -> 0.75 and -0.25 each, not divided by their std 0.5."""
    assert normalize([1.0, 0.0, 0.0, 0.0], std=False) == pytest.approx((0.75, -0.25, -0.25, -0.25))
    assert normalize([1.0, 1.0], std=False) == (0.0, 0.0)  # still no signal: dropped like any zero-std group
    kept = score([7], [[completion(), completion()]], [[1.0, 0.5]], std=False).kept
    assert kept[0].advantages == pytest.approx((0.25, -0.25))
