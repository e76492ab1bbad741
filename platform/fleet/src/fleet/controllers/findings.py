"""A finding: one thing a controller does wrong or never does with a rendered object (pure data)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    where: str  # the object (and PodSet) it is about, e.g. "RayJob team-research/sft, PodSet workers"
    rule: str  # which rule: never-managed, no-queue, refused, never-admitted, pool-not-enforced, ...
    message: str  # what happens and how to fix it

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"
