"""GRPO's task and its evaluation, shared by the distributed run (controller.py, policy.py, launch.py) and the
single-process loop (loop.py): what the policy is asked, how it is scored, held-out greedy accuracy.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from contract.problem import Invalid
from trainer.rl.ends import Ending, find_end
from trainer.rl.episode import Completion
from trainer.rl.generate import sample
from trainer.rl.prompts import Problem, Prompts, arithmetic_problems, read_jsonl, split
from trainer.rl.rewards import Rewards, resolve
from trainer.rl.settings import RL
from trainer.rl.tokens import ByteTokenizer, Tokenizer, allowed_mask, digit_ids


@dataclass(frozen=True, kw_only=True)
class Task:
    """What the policy is asked, where its answers end, and how they are scored."""

    prompts: Prompts
    tokenizer: Tokenizer
    rewards: Rewards
    allowed: torch.Tensor | None  # (V,) bool or None
    max_tokens: int
    ends: tuple[int, ...] = ()  # end-of-sequence ids: the engines stop on them (the tokenizer's)
    stops: tuple[str, ...] = ()  # stop strings (rl.stop): cut where the response's text holds one

    def end(self, response: Sequence[int]) -> Ending:
        return find_end(response, self.tokenizer, ends=self.ends, stops=self.stops, max_tokens=self.max_tokens)


@dataclass(frozen=True, kw_only=True)
class Scored:
    """Completions cut at their ends, each one's reward on its text, and how many ran out of tokens."""

    groups: list[list[Completion]]
    rewards: list[list[float]]
    truncated: int


def score_answers(task: Task, problems: Sequence[Problem], groups: Sequence[Sequence[Completion]]) -> Scored:
    """Each group's completions (one group per problem) cut at their ends and scored on the text before it."""
    cut: list[list[Completion]] = []
    rewards: list[list[float]] = []
    truncated = 0
    end = functools.cache(task.end)  # a response's end is its tokens' alone, and a group repeats answers
    for problem, group in zip(problems, groups, strict=True):
        endings = [end(c.response) for c in group]
        cut.append([c.cut(e.length) for c, e in zip(group, endings, strict=True)])
        rewards.append([task.rewards(problem.prompt, e.text, problem.answer) for e in endings])
        truncated += sum(e.truncated for e in endings)
    return Scored(groups=cut, rewards=rewards, truncated=truncated)


def allowed_ids(settings: RL, tokenizer: Tokenizer, vocab: int) -> list[int] | None:
    """``rl.allowed`` in this tokenizer's ids (with its end ids), or None for the whole vocabulary.

    Refused in one line when the tokenizer cannot express the set or its ids do not fit the model.
    """
    if settings.allowed != "digits":
        return None
    digits = digit_ids(tokenizer)
    if not digits:
        raise Invalid(["rl.allowed: digits: no token of the tokenizer is digits; set rl.allowed=''"])
    ids = sorted({*digits, *tokenizer.ends})
    if ids[-1] >= vocab:
        raise Invalid(
            [
                f"rl.allowed: digits: token {ids[-1]} is past the model's vocab {vocab}; set model.vocab to the tokenizer's"
            ]
        )
    return ids


def tokens_problem(settings: RL, vocab: int, tokenizer: Tokenizer) -> str | None:
    """One line when ``rl.allowed`` cannot be expressed in the run's tokenizer (preconditions, at start); None if it can."""
    try:
        allowed_ids(settings, tokenizer, vocab)
    except Invalid as error:
        return error.lines[0]
    return None


def make_task(settings: RL, vocab: int, tokenizer: Tokenizer | None = None) -> Task:
    problems = arithmetic_problems() if settings.task == "arithmetic" else read_jsonl(settings.task)
    tokenizer = tokenizer or ByteTokenizer()
    ids = allowed_ids(settings, tokenizer, vocab)
    return Task(
        prompts=split(problems, settings.held_out, settings.seed),
        tokenizer=tokenizer,
        rewards=Rewards(resolve(settings.reward)),
        allowed=None if ids is None else allowed_mask(vocab, ids),
        max_tokens=settings.max_tokens,
        ends=tokenizer.ends,
        stops=settings.stop,
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
                       ends=task.ends)  # fmt: skip
        for p, tokens, length in zip(group, drawn.tokens.tolist(), drawn.lengths.tolist(), strict=True):
            correct += task.rewards(p.prompt, task.end(tokens[:length]).text, p.answer) >= 1.0
    model.train(was_training)
    return correct / len(problems)
