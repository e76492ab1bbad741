"""GPUs per region and per team, before and after, from each side's `meridian plan --json`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Delta:
    name: str
    before: int
    after: int


def region_gpus(plan: dict[str, Any] | None) -> dict[str, int]:
    return {r["name"]: int(r["capacity"]["gpus"]) for r in (plan or {}).get("regions", [])}


def team_gpus(plan: dict[str, Any] | None) -> dict[str, dict[str, int]]:
    return {t["name"]: {k: int(v) for k, v in t["quota"].items()} for t in (plan or {}).get("teams", [])}


def _deltas(before: dict[str, int], after: dict[str, int]) -> list[Delta]:
    names = [*after, *(n for n in before if n not in after)]
    return [Delta(n, before.get(n, 0), after.get(n, 0)) for n in names]


def capacity_deltas(before: dict[str, Any] | None, after: dict[str, Any] | None) -> tuple[list[Delta], list[Delta]]:
    """(regions, teams): total GPUs per region; nominal GPUs per team (all regions), and per team and region."""
    regions = _deltas(region_gpus(before), region_gpus(after))
    old, new = team_gpus(before), team_gpus(after)
    teams = _deltas({t: sum(q.values()) for t, q in old.items()}, {t: sum(q.values()) for t, q in new.items()})
    per_region = []
    for team in [*new, *(t for t in old if t not in new)]:
        o, n = old.get(team, {}), new.get(team, {})
        per_region += [
            Delta(f"{team} in {r}", o.get(r, 0), n.get(r, 0))
            for r in [*n, *(r for r in o if r not in n)]
            if o.get(r, 0) != n.get(r, 0)
        ]
    return regions, teams + per_region
