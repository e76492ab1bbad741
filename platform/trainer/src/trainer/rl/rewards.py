"""Verifiable rewards: exact match (the arithmetic task), math answers through math-verify, or your own hook.

A reward function is ``(prompt: str, completion: str, answer: str) -> float``. Name one with
``rl.reward``:

- ``exact``: 1.0 when the completion, stripped of surrounding whitespace, equals the answer, else 0.0;
- ``math``: 1.0 when math-verify finds the completion's final answer equal to the reference (LaTeX,
  ``\\boxed{}``, plain numbers and expressions), else 0.0;
- ``module:function``: any importable function with that signature, e.g. ``my_rewards.code:passes``
  (it must be on the trainer's PYTHONPATH and in its image). It runs in the controller's process,
  once per completion; it should be fast and must not keep state between calls.

A reward that raises, or returns something that is not a finite number, is a failure: the completion
gets 0.0 and ``Rewards.failures`` counts it. The loop never stops on a reward.
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Callable

from contract.problem import Invalid

RewardFn = Callable[[str, str, str], float]


def exact(prompt: str, completion: str, answer: str) -> float:
    return 1.0 if completion.strip() == answer.strip() else 0.0


def math_answer(prompt: str, completion: str, answer: str) -> float:
    from math_verify import parse, verify  # type: ignore[import-untyped]  # imported here: it pulls in sympy, which only math runs need

    gold, predicted = parse(answer), parse(completion)
    return 1.0 if gold and predicted and verify(gold, predicted) else 0.0


BUILT_IN: dict[str, RewardFn] = {"exact": exact, "math": math_answer}


def resolve(spec: str, where: str = "rl.reward") -> RewardFn:
    """A built-in name or ``module:function``, checked to be callable with (prompt, completion, answer)."""
    if spec in BUILT_IN:
        return BUILT_IN[spec]
    module_name, colon, name = spec.partition(":")
    if not colon or not module_name or not name:
        raise Invalid([f"{where}: {spec!r} is neither {', '.join(BUILT_IN)} nor module:function; name one of them"])
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # a hook's import can fail any way: report it, never a traceback
        raise Invalid([f"{where}: cannot import {module_name} ({type(e).__name__}: {e}); check PYTHONPATH"]) from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise Invalid([f"{where}: {module_name} has no function {name}; define {name}(prompt, completion, answer)"])
    try:
        inspect.signature(fn).bind("prompt", "completion", "answer")
    except TypeError:
        raise Invalid([f"{where}: {spec} does not take (prompt, completion, answer); change its signature"]) from None
    except ValueError:  # a builtin without a signature: call it and see
        pass
    result: RewardFn = fn
    return result


class Rewards:
    """A reward function made safe for the loop: failures score 0.0 and are counted."""

    def __init__(self, fn: RewardFn) -> None:
        self.fn = fn
        self.failures = 0
        self.last_failure = ""

    def __call__(self, prompt: str, completion: str, answer: str) -> float:
        try:
            value = self.fn(prompt, completion, answer)
            score = float(value)
        except Exception as e:  # the hook is someone else's code: whatever it raises, the run goes on
            self.failures += 1
            self.last_failure = f"{type(e).__name__}: {str(e)[:200]}"
            return 0.0
        if not math.isfinite(score):
            self.failures += 1
            self.last_failure = f"returned {value!r}"
            return 0.0
        return score
