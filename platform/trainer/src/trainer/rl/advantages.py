"""Group-normalized advantages (GRPO): each reward against its own prompt's group, no value model.

``A_i = (r_i - mean(r)) / (std(r) + eps)`` with the sample standard deviation (Bessel's correction,
as torch's ``std`` and torchforge's ComputeAdvantages use). A group whose rewards are all equal
carries no signal: every advantage would be 0, so its completions would cost a forward and backward
pass for a zero gradient (and, with a KL term, pull only towards the reference). Such groups are
dropped and counted (``dropped_zero_advantage``), never trained on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from trainer.rl.episode import Completion, Group

EPS = 1e-4  # torchforge's and the research note's value: bounded advantages when std is tiny but not zero


def normalize(rewards: Sequence[float], eps: float = EPS, *, std: bool = True) -> tuple[float, ...]:
    """The group's advantages; all zero when the rewards are all equal (or there is only one).

    ``std`` False: ``r_i - mean(r)`` alone (Dr. GRPO, arXiv:2503.20783: dividing by the std weighs the
    groups whose rewards barely differ, too easy or too hard, the most).
    """
    n = len(rewards)
    if n < 2 or all(r == rewards[0] for r in rewards):
        return (0.0,) * n
    mean = sum(rewards) / n
    spread = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1)) + eps if std else 1.0
    return tuple((r - mean) / spread for r in rewards)


@dataclass(frozen=True, kw_only=True)
class Scored:
    kept: tuple[Group, ...]
    dropped_zero_advantage: tuple[int, ...]  # prompt indices whose groups had all-equal rewards


def score(
    prompt_indices: Sequence[int],
    completions: Sequence[Sequence[Completion]],
    rewards: Sequence[Sequence[float]],
    eps: float = EPS,
    *,
    std: bool = True,
) -> Scored:
    """Groups with advantages for each prompt; zero-std groups go to ``dropped_zero_advantage``."""
    kept: list[Group] = []
    dropped: list[int] = []
    for index, group, scores in zip(prompt_indices, completions, rewards, strict=True):
        advantages = normalize(scores, eps, std=std)
        if not any(advantages):
            dropped.append(index)
            continue
        kept.append(Group(prompt_index=index, completions=tuple(group), rewards=tuple(scores), advantages=advantages))
    return Scored(kept=tuple(kept), dropped_zero_advantage=tuple(dropped))
