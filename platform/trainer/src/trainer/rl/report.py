"""What an RL run shows: one console line per committed step, and where the generators' time went.

Pure: the distributed mode gathers the numbers (the controller, the generators, the trainer's commit) and
hands them here; the console line, the goodput summary and the live metrics (``trainer.rl.metrics``) are
made from the same ``StepReport``.

Generator time is booked like the trainer's goodput (``trainer.observe.goodput``), each second to one state:
``generating`` (sampling completions: the useful part), ``syncing`` (receiving a new policy version's
weights) and ``waiting`` (idle: no prompts issued, or held back by the age bound). The trainer's buckets
stay as they are; the generators' sit beside them under the summary's ``"generators"`` key.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from contract.metrics import GENERATOR_STATES
from trainer.rl.stats import Lengths, PolicyStats


@dataclass(frozen=True, kw_only=True)
class StepReport:
    """One committed RL step, with what happened since the previous report."""

    step: int  # the committed step: the policy version after it
    steps: int  # the target
    reward: float  # mean sampled reward of the batch's rollouts; NaN when the batch was all earlier surplus
    greedy: float | None = None  # held-out greedy accuracy, when evaluated at this step
    version: int  # the policy version the batch was trained from
    ages: tuple[int, ...]  # each trained group's age (version - its oldest completion's version)
    generated_tokens: int  # response tokens sampled since the previous report
    trained_tokens: int  # response tokens in this step's batch, every group's share
    generate_seconds: float  # wall seconds the generators spent generating since the previous report, summed
    train_seconds: float
    sync_seconds: float  # the last weight sync
    reissued: int = 0  # prompts issued again since the previous report
    refused: int = 0  # generator answers refused since the previous report (trainer.rl.wire.Refused)
    policy: PolicyStats | None = None  # clip fraction, importance ratio, entropy, KL over the groups that reported
    lengths: Lengths | None = None  # the batch's response lengths and truncation
    elapsed_s: float | None = None  # since the launcher started
    eta_s: float | None = None  # to the last step, at this launch's pace since its first committed step


def rate(tokens: int, seconds: float) -> str:
    """Tokens per second with thousands separators; n/a when no time was measured."""
    return f"{tokens / seconds:,.0f} tok/s" if seconds > 0 else "n/a tok/s"


def step_line(r: StepReport) -> str:
    """The console line for one step (the trainer's console style: two spaces between fields)."""
    parts = [f"rl step {r.step}/{r.steps}", f"reward {'n/a' if math.isnan(r.reward) else f'{r.reward:.2f}'}"]
    if r.greedy is not None:
        parts.append(f"greedy {r.greedy:.2f}")
    parts.append(f"version {r.version}")
    ages = f"age max {max(r.ages)} mean {sum(r.ages) / len(r.ages):.1f}" if r.ages else "age n/a"
    parts += [ages, f"gen {rate(r.generated_tokens, r.generate_seconds)}"]
    parts += [f"train {rate(r.trained_tokens, r.train_seconds)}", f"sync {r.sync_seconds:.3f} s"]
    parts += policy_fields(r.policy, r.lengths)
    if r.reissued > 0:
        parts.append(f"reissued {r.reissued}")
    if r.refused > 0:
        parts.append(f"refused {r.refused}")
    if r.elapsed_s is not None:
        parts.append(f"elapsed {duration(r.elapsed_s)}")
    if r.eta_s is not None:
        parts.append(f"eta {duration(r.eta_s)}")
    return "  ".join(parts)


def policy_fields(policy: PolicyStats | None, lengths: Lengths | None) -> list[str]:
    """The step line's view of what training did: clip fraction, importance ratio (mean and max), entropy, KL
    (``ref``: the loss's, against the reference; ``gen``: the sampler against the trainer), lengths, truncation."""
    parts = []
    if policy is not None:
        parts += [
            f"clip {policy.clip_fraction:.1%}", f"ratio {policy.ratio_mean:.2f} max {policy.ratio_max:.2f}",
            f"entropy {policy.entropy:.2f}", f"kl {'ref' if policy.kl_against == 'reference' else 'gen'} {policy.kl:.4f}",
        ]  # fmt: skip
        if policy.shares < policy.expected:  # a group's report never came: the numbers are the others'
            parts.append(f"of {policy.shares}/{policy.expected} groups")
    if lengths is not None and lengths.completions:
        parts += [f"len {lengths.mean:.1f} max {lengths.max}", f"truncated {lengths.truncated:.0%}"]
    return parts


def duration(seconds: float) -> str:
    """``45s``, ``2m05s``, ``1h02m``: a console's elapsed time or ETA."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def eta(now: float, first: tuple[float, int], step: int, steps: int) -> float | None:
    """Seconds to step ``steps`` at the pace since ``first`` (when, step); None before a second step committed."""
    when, at = first
    if step <= at:
        return None
    return (now - when) / (step - at) * max(0, steps - step)


def check_state(state: str) -> str:
    """``state`` if it is a generator state (contract.metrics.GENERATOR_STATES); ValueError otherwise."""
    if state not in GENERATOR_STATES:
        raise ValueError(f"generator state {state!r} is not one of {', '.join(GENERATOR_STATES)}")
    return state


@dataclass
class GeneratorTime:
    """One generator's seconds by state; ``observer`` (the live metrics) hears each booking as it happens."""

    clock: Callable[[], float] = time.monotonic
    observer: Callable[[str, float], None] | None = None
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(GENERATOR_STATES, 0.0))

    @contextmanager
    def timed(self, state: str) -> Iterator[None]:
        """Book the time the block takes to ``state``, also when it raises."""
        check_state(state)
        start = self.clock()
        try:
            yield
        finally:
            self.add(state, self.clock() - start)

    def add(self, state: str, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"negative seconds {seconds} for {state}")
        self.seconds[check_state(state)] += seconds
        if self.observer is not None:
            self.observer(state, seconds)

    def report(self) -> dict[str, Any]:
        return _summary(self.seconds)


def _summary(seconds: Mapping[str, float]) -> dict[str, Any]:
    total = sum(seconds.values())
    return {
        "seconds": {s: round(seconds[s], 3) for s in GENERATOR_STATES},
        "total_seconds": round(total, 3),
        "generating": round(seconds["generating"] / total, 4) if total else 0.0,  # the share spent generating
    }


def combine_generators(reports: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Several generators' ``report()``s as one: seconds summed per state, the share over the sum."""
    seconds = dict.fromkeys(GENERATOR_STATES, 0.0)
    count = 0
    for r in reports:
        count += 1
        for state, value in r["seconds"].items():
            seconds[check_state(state)] += value
    return _summary(seconds) | {"generator_reports": count}


def with_generators(summary: Mapping[str, Any], reports: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The run's goodput summary (``trainer.observe.goodput.combine``) with the generators' time beside it."""
    return dict(summary) | {"generators": combine_generators(reports)}


def generators_line(combined: Mapping[str, Any]) -> str:
    """The generators' part of the final console line, from ``combine_generators``'s result."""
    count = combined.get("generator_reports", 0)
    if not count:
        return "generators: n/a (no generator reported)"
    seconds = combined["seconds"]
    rest = ", ".join(f"{s} {seconds[s]:.1f}s" for s in GENERATOR_STATES if s != "generating")
    return (
        f"generators: {combined['generating']:.1%} generating "
        f"({seconds['generating']:.1f}s of {combined['total_seconds']:.1f}s; {rest}) over {count} generator(s)"
    )


@dataclass
class TrainerTime:
    """Where the trainer's steps went, as the first group to commit each step measured it: ``training`` (from its
    batch to the commit) against ``waiting`` (for the controller to form the batch: generation not keeping up).
    The groups' goodput books both as productive; this splits them."""

    training: float = 0.0
    waiting: float = 0.0
    steps: int = 0

    def add(self, training: float, waiting: float) -> None:
        if training < 0 or waiting < 0:
            raise ValueError(f"negative seconds: training {training}, waiting {waiting}")
        self.training += training
        self.waiting += waiting
        self.steps += 1

    def report(self) -> dict[str, Any]:
        total = self.training + self.waiting
        return {
            "seconds": {"training": round(self.training, 3), "waiting": round(self.waiting, 3)},
            "steps": self.steps,
            "training": round(self.training / total, 4) if total else 0.0,  # the share spent training
        }


def trainer_line(report: Mapping[str, Any]) -> str:
    """The trainer's part of the final console line, from ``TrainerTime.report``."""
    if not report.get("steps"):
        return "trainer: n/a (no step committed)"
    seconds = report["seconds"]
    total = seconds["training"] + seconds["waiting"]
    return (
        f"trainer: {report['training']:.1%} training ({seconds['training']:.1f}s of {total:.1f}s; "
        f"waiting for batches {seconds['waiting']:.1f}s) over {report['steps']} step(s)"
    )
