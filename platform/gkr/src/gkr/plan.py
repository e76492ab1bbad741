"""What a submit does, as data: the steps from a job file and flags to what gets printed or applied.

`plan` returns one job's objects in one region (`One`) or a run across regions (`Across`, a
gkr.multiregion.Run), each with its warnings; nothing is applied here. The command
(gkr/commands/submit.py) prints the summary and the warnings, then prints or applies the objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from contract.problem import Invalid
from gkr.config import UserConfig
from gkr.flags import Flags
from gkr.objectcounts import over_quota
from gkr.registry import Located
from gkr.resolve import roles_warning, share_warning
from gkr.resolved import Resolved
from gkr.submit import prepare_job, read

if TYPE_CHECKING:
    from gkr.multiregion import Run


@dataclass(frozen=True)
class One:
    """A job in one region: resolved, its objects rendered and checked, and what the user should know."""

    resolved: Resolved
    objects: list[dict[str, Any]]
    warnings: list[str]


@dataclass(frozen=True)
class Across:
    """A run across regions (gkr.multiregion.Run), and what the user should know."""

    run: Run
    warnings: list[str]


def plan(
    file: str | None, flags: Flags, found: Located, user: UserConfig, context: str | None, workdir: str | None
) -> One | Across:
    """What submitting this job would do; Invalid with a line for every problem found."""
    spec, origins = read(file, flags, user.team)
    if not spec.regions:
        resolved, objects = prepare_job(spec, origins, found, user.region)
        return One(resolved, objects, _warnings([(resolved, objects)]))
    if context is not None or workdir is not None:
        flag = "--context" if context is not None else "--workdir"
        raise Invalid([f"flag {flag}: not for a run across regions yet (each region uses its GKE context)"])
    from gkr import multiregion  # runs across regions only: a one-region submit never loads it (start-up)

    run = multiregion.prepare(spec, origins, found)
    # Each region's namespace holds its part's Secret and RayJob; the home's the Lighthouse's objects too.
    parts = [(p.resolved, [p.secret, p.rayjob, *(run.lighthouse if p is run.home else ())]) for p in run.parts]
    return Across(run, _warnings(parts))


def _warnings(parts: list[tuple[Resolved, list[dict[str, Any]]]]) -> list[str]:
    """What the user should know of each region's part: its share of a pool, its roles, its object counts."""
    found = []
    for part, objects in parts:
        quota = part.team.objects.get(part.region.name, {})
        counts = over_quota(objects, quota, part.namespace, part.region.name)
        found += [w for w in (share_warning(part), roles_warning(part), counts) if w is not None]
    return found
