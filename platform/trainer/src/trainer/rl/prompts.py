"""Prompts as a pure function of (seed, index), from JSONL files or the built-in arithmetic task.

Index ``i`` is problem ``permutation(seed, epoch)[i % n]`` of the training split, epoch ``i // n``: each
epoch visits every training problem once in its own order, and a resumed run that re-issues index ``i``
gets exactly the problem it had (as data/batches.py's batches are a pure function of their index). A held-out
split, chosen once from a separate seed, is never issued for training: greedy evaluation reads it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from contract.problem import Invalid

MAX_LINE = 1 << 20  # characters in one JSONL line: a prompt longer than this is a wrong file, not a prompt


@dataclass(frozen=True, kw_only=True)
class Problem:
    prompt: str
    answer: str


@dataclass(frozen=True, kw_only=True)
class Prompts:
    train: tuple[Problem, ...]
    held_out: tuple[Problem, ...]
    seed: int
    _orders: dict[int, list[int]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.train:
            raise ValueError("no training problems")

    def _order(self, epoch: int) -> list[int]:
        order = self._orders.get(epoch)
        if order is None:
            order = list(range(len(self.train)))
            random.Random(f"{self.seed}/{epoch}").shuffle(order)  # a str seed: stable across Python versions
            self._orders.clear()  # one epoch at a time: the cache stays one permutation long
            self._orders[epoch] = order
        return order

    def __getitem__(self, index: int) -> Problem:
        if index < 0:
            raise IndexError(f"prompt index {index} < 0")
        epoch, position = divmod(index, len(self.train))
        return self.train[self._order(epoch)[position]]


def split(problems: Sequence[Problem], held_out: int, seed: int, split_seed: int = 0) -> Prompts:
    """``held_out`` problems for evaluation (chosen by ``split_seed``), the rest for training (ordered by ``seed``)."""
    if not 0 <= held_out < len(problems):
        raise ValueError(f"held_out {held_out} must leave training problems out of {len(problems)}")
    order = list(range(len(problems)))
    random.Random(f"split/{split_seed}").shuffle(order)
    chosen = set(order[:held_out])
    return Prompts(
        train=tuple(p for i, p in enumerate(problems) if i not in chosen),
        held_out=tuple(problems[i] for i in sorted(chosen)),
        seed=seed,
    )


def arithmetic_problems(max_sum: int = 9, padded: bool = True) -> tuple[Problem, ...]:
    """``a+b=`` for every a, b >= 0 with a + b <= max_sum: one-digit answers, 55 sums at 9.

    ``padded``: each sum written four ways, either operand with or without a leading zero (``3+4=``,
    ``03+4=``, ``3+04=``, ``03+04=``): 220 prompts. A held-out split then holds out writings the policy
    never trained on, of sums it did. The 55 sums alone cannot be held out usefully: a model this size
    does not infer unseen sums from the others (README, "The learning test").
    """
    if not 0 <= max_sum <= 9:
        raise ValueError("max_sum must be a digit: the answer is one token")
    widths = ((1, 1), (2, 1), (1, 2), (2, 2)) if padded else ((1, 1),)
    return tuple(
        Problem(prompt=f"{a:0{wa}d}+{b:0{wb}d}=", answer=str(a + b))
        for a in range(max_sum + 1)
        for b in range(max_sum + 1 - a)
        for wa, wb in widths
    )


def _problem(line: str, where: str) -> Problem:
    if len(line) > MAX_LINE:
        raise Invalid([f"{where}: a line of {len(line)} characters (limit {MAX_LINE}); split or shorten it"])
    try:
        data = json.loads(line)
    except json.JSONDecodeError as e:
        raise Invalid([f"{where}: not JSON ({e.msg}); write one object per line"]) from None
    if not isinstance(data, dict):
        raise Invalid([f'{where}: a {type(data).__name__}, not an object; write {{"prompt": ..., "answer": ...}}'])
    prompt, answer = data.get("prompt"), data.get("answer")
    if not isinstance(prompt, str) or not prompt:
        raise Invalid([f"{where}: prompt: missing or not a non-empty string; add a string prompt"])
    if isinstance(answer, bool) or not isinstance(answer, str | int | float):
        raise Invalid([f"{where}: answer: missing or not a string or number; add the reference answer"])
    return Problem(prompt=prompt, answer=str(answer))


def parse_jsonl(text: str, source: str) -> tuple[Problem, ...]:
    """Problems from JSONL text; blank lines are skipped, anything else wrong is one line naming source:line."""
    problems = tuple(
        _problem(line, f"{source}:{number}") for number, line in enumerate(text.splitlines(), start=1) if line.strip()
    )
    if not problems:
        raise Invalid([f'{source}: no problems; write one {{"prompt": ..., "answer": ...}} object per line'])
    return problems


def read_jsonl(url: str) -> tuple[Problem, ...]:
    """From a local path or any fsspec URL (``gs://bucket/path.jsonl`` through gcsfs)."""
    import fsspec  # type: ignore[import-untyped]  # imported here: the built-in task never reads files

    try:
        with fsspec.open(url, "rt", encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise Invalid(
            [f"{url}: cannot read it ({type(e).__name__}: {str(e)[:200]}); check the path and access"]
        ) from None
    return parse_jsonl(text, url)
