"""The one rule for what a researcher did not say, read off the registry alone.

Region: `--region`, else the job file's `region:`, else `region:` in the user config, else the
team's region with the largest GPU quota, ties broken by the order of `regions:` in fleet.yaml.
The rule reads the region order (a list in fleet.yaml, kept as a list in registry.json), never the
order of the team's quota mapping, which a JSON round trip may sort.
"""

from __future__ import annotations

from contract.problem import Invalid, one_of
from contract.registry import Region, Registry, Team


def default_region(registry: Registry, team: Team) -> str | None:
    """The team's region with the most GPU quota (first in fleet.yaml on a tie); None if it has quota nowhere."""
    ranked = [(team.quota.get(r.name, 0), -index, r.name) for index, r in enumerate(registry.regions)]
    best = max(ranked, default=(0, 0, ""))
    return best[2] if best[0] > 0 else None


def target(registry: Registry, team: str | None, region: str | None) -> tuple[Team, Region]:
    """The team and region a command about existing jobs talks to (flags, else the user config, else the rule)."""
    teams = {t.name: t for t in registry.teams}
    if team not in teams:
        if team:
            raise Invalid([f"unknown team {team!r}; {one_of(teams, team)}"])
        raise Invalid([f"pass --team (one of {', '.join(teams)}) or set `team:` in the user config"])
    name = region or default_region(registry, teams[team]) or ""
    regions = {r.name: r for r in registry.regions}
    if name not in regions:
        raise Invalid([f"unknown region {name!r}; use one of {', '.join(regions)}"])
    return teams[team], regions[name]
