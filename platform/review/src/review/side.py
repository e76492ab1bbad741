"""A side's plan document (scripts/plan_side.py), read as untrusted data.

The pull request's side is produced by the pull request's own code, so what it
wrote is checked like any other hostile input before the deciding code uses
it: bounded size and nesting, the expected shape, the numbers capacity and
quotas are computed from. A document that fails ends the review in one line
(exit 2): the check fails closed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = "meridian-plan-side/1"
MAX_BYTES = 64 * 1024 * 1024  # the shipped fleet's document is about 80 KB
MAX_DEPTH = 64  # synthesized Terraform nests about 12 deep


class SideError(Exception):
    """The side's document cannot be used; the message says why."""


@dataclass(frozen=True)
class Side:
    plan: dict[str, Any]  # `meridian plan --json`
    generate_returncode: int
    generate_stderr: str
    stacks: dict[str, dict[str, Any]]  # stack name -> its cdk.tf.json


def _depth(value: Any, limit: int) -> int:
    """Nesting depth, iteratively (a hostile document must not exhaust the stack)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if depth > limit:
            return depth
        deepest = max(deepest, depth)
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        todo += [(c, depth + 1) for c in children if isinstance(c, dict | list)]
    return deepest


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 10**9:
        raise SideError(f"{where}: {value!r:.40} is not a count")
    return value


def _plan(plan: Any, where: str) -> dict[str, Any]:
    """The parts of `meridian plan --json` the review computes with: region capacity and team quotas."""
    if not isinstance(plan, dict):
        raise SideError(f"{where}.plan: not an object")
    for i, region in enumerate(plan.get("regions") or []):
        if not isinstance(region, dict) or not isinstance(region.get("name"), str):
            raise SideError(f"{where}.plan.regions[{i}]: no name")
        _int((region.get("capacity") or {}).get("gpus"), f"{where}.plan.regions[{i}].capacity.gpus")
    for i, team in enumerate(plan.get("teams") or []):
        if (
            not isinstance(team, dict)
            or not isinstance(team.get("name"), str)
            or not isinstance(team.get("quota"), dict)
        ):
            raise SideError(f"{where}.plan.teams[{i}]: no name or quota")
        for region, gpus in team["quota"].items():
            _int(gpus, f"{where}.plan.teams[{i}].quota.{region}")
    return plan


def parse(text: str | bytes, where: str) -> Side:
    if len(text) > MAX_BYTES:
        raise SideError(f"{where}: {len(text):,} bytes, more than the {MAX_BYTES:,} a plan document may have")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise SideError(f"{where}: not JSON ({str(exc)[:80]})") from None
    if _depth(data, MAX_DEPTH) > MAX_DEPTH:
        raise SideError(f"{where}: nested deeper than {MAX_DEPTH} levels")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise SideError(f"{where}: not a {FORMAT} document (written by scripts/plan_side.py)")
    check, stacks = data.get("generate_check"), data.get("stacks")
    if not isinstance(check, dict) or not isinstance(check.get("stderr"), str):
        raise SideError(f"{where}.generate_check: not an object with stderr")
    if not isinstance(stacks, dict) or not all(isinstance(s, dict) for s in stacks.values()):
        raise SideError(f"{where}.stacks: not an object of stacks")
    returncode = check.get("returncode")
    if isinstance(returncode, bool) or not isinstance(returncode, int):
        raise SideError(f"{where}.generate_check.returncode: not an exit code")
    return Side(_plan(data.get("plan"), where), returncode, check["stderr"], stacks)


def load(path: Path) -> Side:
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise SideError(f"{path}: {size:,} bytes, more than the {MAX_BYTES:,} a plan document may have")
        return parse(path.read_bytes(), str(path))
    except FileNotFoundError:
        raise SideError(
            f"{path}: no plan document: the side's plan could not be made (the plan job's error.txt says why)"
        ) from None
    except OSError as exc:
        raise SideError(f"{path}: cannot read it ({exc.strerror})") from None
