"""Why a region's planned address ranges move, and how to keep them.

The fleet's automatic address plan (fleet.planner) gives each region the block of
its position in `regions:`, so removing or inserting a region moves the ranges
of every region after it, which replaces their subnets and clusters. A reviewer
sees those replacements as destructive lines; this module says the cause (which
region was removed or inserted before it) and the fix: pin BASE's ranges under
`regions[i].network` in fleet.yaml (fleet.model.RegionNetwork's fields), read
from each side's `meridian plan --json`.
"""

from __future__ import annotations

from typing import Any

from contract.words import join_words, plural

Plan = dict[str, Any]


def _regions(plan: Plan | None) -> list[dict[str, Any]]:
    return list((plan or {}).get("regions", []))


def _moved(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The kinds of range that differ ("nodes", "pods", "rdma"); each range itself is in the Terraform section."""
    a, b = old.get("ranges") or {}, new.get("ranges") or {}
    out = [k for k in a if b.get(k) and a[k] != b[k]]
    if (old.get("rdma") or {}) != (new.get("rdma") or {}) and new.get("rdma"):
        out.append("rdma")
    return out


def _cause(name: str, old_names: list[str], new_names: list[str]) -> str:
    removed = [n for n in old_names[: old_names.index(name)] if n not in new_names]
    inserted = [n for n in new_names[: new_names.index(name)] if n not in old_names]
    parts = []
    if removed:
        parts.append(f"{join_words(removed)}, before it in fleet.yaml, {plural(len(removed), 'was', 'were')} removed")
    if inserted:
        parts.append(f"{join_words(inserted)} {plural(len(inserted), 'was', 'were')} inserted before it")
    if not parts:
        return "the fleet's network settings or its position changed"
    return " and ".join(parts)


def _pin(old: dict[str, Any]) -> str:
    ranges = ", ".join(f"{k}: {v}" for k, v in (old.get("ranges") or {}).items())
    rdma = old.get("rdma") or {}
    if rdma:
        zones = ", ".join(f"{zone}: [{', '.join(cidrs)}]" for zone, cidrs in rdma.items())
        ranges += f", rdma: {{{zones}}}"
    return f"{{{ranges}}}"


def moved_ranges(before: Plan | None, after: Plan | None) -> list[str]:
    """One line per region on both sides whose planned ranges move: what moves, why, and the pin that keeps them."""
    old = {r["name"]: r for r in _regions(before)}
    new_regions = _regions(after)
    old_names, new_names = list(old), [r["name"] for r in new_regions]
    lines = []
    for index, region in enumerate(new_regions):
        name = region["name"]
        if name not in old:
            continue
        moved = _moved(old[name], region)
        if not moved:
            continue
        lines.append(
            f"{name}: its planned {join_words(moved)} ranges move because {_cause(name, old_names, new_names)} "
            "(the automatic address plan follows each region's position in `regions:`), which replaces its "
            f"subnets and cluster. To keep them, pin BASE's ranges in fleet.yaml: `regions[{index}].network: "
            f"{_pin(old[name])}`"
        )
    return lines
