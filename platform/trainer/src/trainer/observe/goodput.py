"""Goodput: productive training time against the time lost, per run.

Every second of a replica group's wall time is booked to one bucket:
productive (steps that were committed and never replayed), start-up,
checkpoint blocking, recovery stalls (waiting for a quorum, healing) and
replayed steps (work redone after resuming from a checkpoint).
Goodput = productive / total.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

BUCKETS = ("productive", "startup", "checkpoint", "recovery", "replayed", "failed_steps")


@dataclass
class Goodput:
    clock: Callable[[], float] = time.monotonic
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(BUCKETS, 0.0))
    steps: dict[str, int] = field(default_factory=lambda: {"committed": 0, "replayed": 0, "failed": 0})

    @contextmanager
    def timed(self, bucket: str) -> Iterator[None]:
        start = self.clock()
        try:
            yield
        finally:
            self.seconds[bucket] += self.clock() - start

    def step(self, seconds: float, committed: bool, replayed: bool) -> None:
        """Book one training step: productive only if committed and not a replay of lost work."""
        if not committed:
            self.seconds["failed_steps"] += seconds
            self.steps["failed"] += 1
        elif replayed:
            self.seconds["replayed"] += seconds
            self.steps["replayed"] += 1
        else:
            self.seconds["productive"] += seconds
            self.steps["committed"] += 1

    def add(self, bucket: str, seconds: float) -> None:
        self.seconds[bucket] += seconds

    @property
    def total(self) -> float:
        return sum(self.seconds.values())

    @property
    def goodput(self) -> float:
        return self.seconds["productive"] / self.total if self.total else 0.0

    def report(self) -> dict[str, object]:
        return {
            "goodput": round(self.goodput, 4),
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "total_seconds": round(self.total, 3),
            "steps": dict(self.steps),
        }

    def line(self, run: str) -> str:
        lost = ", ".join(f"{k} {v:.1f}s" for k, v in self.seconds.items() if k != "productive" and v)
        return f"goodput {run}: {self.goodput:.1%} ({self.seconds['productive']:.1f}s productive of {self.total:.1f}s; {lost or 'nothing lost'})"


def combine(reports: list[dict[str, object]]) -> dict[str, object]:
    """A run's goodput from its replica groups' reports (sums of seconds and steps)."""
    seconds = dict.fromkeys(BUCKETS, 0.0)
    steps = {"committed": 0, "replayed": 0, "failed": 0}
    for r in reports:
        for k, v in r["seconds"].items():  # type: ignore[attr-defined]
            seconds[k] += v
        for k, v in r["steps"].items():  # type: ignore[attr-defined]
            steps[k] += v
    total = sum(seconds.values())
    return {
        "goodput": round(seconds["productive"] / total, 4) if total else 0.0,
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
        "total_seconds": round(total, 3),
        "steps": steps,
        "replica_group_reports": len(reports),
    }


def dumps(report: dict[str, object]) -> str:
    return json.dumps(report, indent=2, sort_keys=True)
