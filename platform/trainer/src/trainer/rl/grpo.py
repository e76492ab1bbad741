"""GRPO's task and its evaluation, shared by the distributed run (controller.py, policy.py, launch.py) and the
single-process loop (loop.py): what the policy is asked, how it is scored, held-out greedy accuracy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from trainer.rl.generate import sample
from trainer.rl.prompts import Problem, Prompts, arithmetic_problems, read_jsonl, split
from trainer.rl.rewards import Rewards, resolve
from trainer.rl.settings import RL
from trainer.rl.tokens import DIGITS, ByteTokenizer, Tokenizer, allowed_mask


@dataclass(frozen=True, kw_only=True)
class Task:
    """What the policy is asked and how it is scored."""

    prompts: Prompts
    tokenizer: Tokenizer
    rewards: Rewards
    allowed: torch.Tensor | None  # (V,) bool or None
    max_tokens: int
    stop: int | None = None


def make_task(settings: RL, vocab: int, tokenizer: Tokenizer | None = None) -> Task:
    problems = arithmetic_problems() if settings.task == "arithmetic" else read_jsonl(settings.task)
    return Task(
        prompts=split(problems, settings.held_out, settings.seed),
        tokenizer=tokenizer or ByteTokenizer(),
        rewards=Rewards(resolve(settings.reward)),
        allowed=allowed_mask(vocab, DIGITS) if settings.allowed == "digits" else None,
        max_tokens=settings.max_tokens,
    )


@torch.no_grad()
def greedy_accuracy(model: torch.nn.Module, problems: Sequence[Problem], task: Task) -> float:
    """The share of ``problems`` whose greedy (argmax, masked) answer scores 1."""
    if not problems:
        return float("nan")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    by_length: dict[int, list[Problem]] = {}
    for p in problems:
        by_length.setdefault(len(task.tokenizer.encode(p.prompt)), []).append(p)
    correct = 0.0
    for group in by_length.values():
        prompts = torch.tensor([task.tokenizer.encode(p.prompt) for p in group], device=device)
        drawn = sample(model, prompts, max_tokens=task.max_tokens, temperature=0.0, allowed=task.allowed, rng=None,
                       stop=task.stop)  # fmt: skip
        for p, tokens, length in zip(group, drawn.tokens.tolist(), drawn.lengths.tolist(), strict=True):
            correct += task.rewards(p.prompt, task.tokenizer.decode(tokens[:length]), p.answer) >= 1.0
    model.train(was_training)
    return correct / len(problems)
