"""What a generator hands the trainer: completions, groups of them per prompt, and the padded training batch.

Alignment, once, for everyone: a sequence is ``prompt + response`` and the model's logits at position
``t`` predict token ``t + 1``. The batch therefore carries ``targets = tokens[:, 1:]`` positions, and
response token ``j`` (0-based) of a prompt of length ``p`` sits at target position ``p - 1 + j``. The
generator's logprobs, the trainer's recompute (loss.response_logprobs) and the mask all use those
positions, so the classic off-by-one cannot creep in between them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True, kw_only=True)
class Completion:
    """One sampled response to one prompt, as the generator produced it."""

    prompt: tuple[int, ...]
    response: tuple[int, ...]
    logprobs: tuple[float, ...]  # the sampler's log-probability of each response token (its masked distribution)
    # The policy version that sampled it. A generation that spanned a weight update carries the OLDEST
    # version that produced any of its tokens (prime-rl's rule): its age is then never understated.
    version: int

    def __post_init__(self) -> None:
        if not self.prompt or not self.response:
            raise ValueError("a completion needs a non-empty prompt and response")
        if len(self.logprobs) != len(self.response):
            raise ValueError(f"{len(self.logprobs)} logprobs for {len(self.response)} response tokens")
        if self.version < 0:
            raise ValueError(f"policy version {self.version} < 0")

    def cut(self, length: int) -> Completion:
        """The first ``length`` response tokens and their logprobs: the completion up to its end (ends.py)."""
        if length == len(self.response):
            return self
        return Completion(
            prompt=self.prompt, response=self.response[:length], logprobs=self.logprobs[:length], version=self.version
        )


@dataclass(frozen=True, kw_only=True)
class Group:
    """The G completions of one prompt with their rewards and group-normalized advantages."""

    prompt_index: int
    completions: tuple[Completion, ...]
    rewards: tuple[float, ...]
    advantages: tuple[float, ...]

    def __post_init__(self) -> None:
        n = len(self.completions)
        if n == 0 or len(self.rewards) != n or len(self.advantages) != n:
            raise ValueError(f"a group needs as many rewards and advantages as completions ({n})")
        if not all(math.isfinite(x) for x in (*self.rewards, *self.advantages)):
            raise ValueError("rewards and advantages must be finite")

    @property
    def version(self) -> int:
        """The oldest policy version among its completions: the group ages as its oldest sample."""
        return min(c.version for c in self.completions)

    def age(self, training_version: int) -> int:
        return training_version - self.version


@dataclass(frozen=True, kw_only=True)
class Batch:
    """Padded tensors for one training step; every per-token tensor is on target positions (T - 1)."""

    tokens: torch.Tensor  # (B, T) long: prompt + response, right-padded with pad_id
    mask: torch.Tensor  # (B, T - 1) bool: True at the target positions of response tokens
    sampler_logprobs: torch.Tensor  # (B, T - 1) float32: the generator's logprobs there, 0 elsewhere
    advantages: torch.Tensor  # (B,) float32
    versions: torch.Tensor  # (B,) long: each completion's (oldest) policy version
    prompt_indices: tuple[int, ...]  # one per row

    def to(self, device: torch.device | str) -> Batch:
        return Batch(
            tokens=self.tokens.to(device),
            mask=self.mask.to(device),
            sampler_logprobs=self.sampler_logprobs.to(device),
            advantages=self.advantages.to(device),
            versions=self.versions.to(device),
            prompt_indices=self.prompt_indices,
        )


def response_mask(prompt_lengths: Sequence[int], response_lengths: Sequence[int], width: int) -> torch.Tensor:
    """(B, width) bool over target positions: row b is True on [p_b - 1, p_b - 1 + r_b)."""
    position = torch.arange(width)
    start = torch.tensor(prompt_lengths) - 1
    end = start + torch.tensor(response_lengths)
    return (position >= start[:, None]) & (position < end[:, None])


def make_batch(groups: Sequence[Group], pad_id: int = 0) -> Batch:
    """Every completion of every group, one row each, right-padded.

    Right padding keeps each row's logits at its real positions exactly what they are unpadded
    (attention is causal: padding after a token cannot reach it), so no attention mask is needed.
    """
    rows = [(g, c, a) for g in groups for c, a in zip(g.completions, g.advantages, strict=True)]
    if not rows:
        raise ValueError("an empty batch")
    length = max(len(c.prompt) + len(c.response) for _, c, _ in rows)
    # Whole rows in Python, then one tensor each: a tensor and a slice assignment per row were 4 torch calls a
    # row, a tenth of a trainer group's step on a 512-completion batch.
    tokens = [[*c.prompt, *c.response, *[pad_id] * (length - len(c.prompt) - len(c.response))] for _, c, _ in rows]
    sampler = [
        [*[0.0] * (len(c.prompt) - 1), *c.logprobs, *[0.0] * (length - len(c.prompt) - len(c.response))]
        for _, c, _ in rows
    ]
    mask = response_mask([len(c.prompt) for _, c, _ in rows], [len(c.response) for _, c, _ in rows], length - 1)
    return Batch(
        tokens=torch.tensor(tokens, dtype=torch.long),
        mask=mask,
        sampler_logprobs=torch.tensor(sampler, dtype=torch.float32),
        advantages=torch.tensor([a for _, _, a in rows], dtype=torch.float32),
        versions=torch.tensor([c.version for _, c, _ in rows], dtype=torch.long),
        prompt_indices=tuple(g.prompt_index for g, _, _ in rows),
    )
