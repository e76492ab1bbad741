"""The one rule for what a researcher did not say: the same answer from a cold or a warm registry cache.

Region: `--region`, else the job file's `region:`, else `region:` in the user config, else the
team's region with the largest GPU quota, ties broken by the order of `regions:` in fleet.yaml.
The rule reads the region order (a list in fleet.yaml, kept as a tuple in the registry), never the
order of the team's quota mapping, which a JSON round trip may sort.
"""

from __future__ import annotations

from gkr.registry import Registry, Team


def default_region(registry: Registry, team: Team) -> str | None:
    """The team's region with the most GPU quota (first in fleet.yaml on a tie); None if it has quota nowhere."""
    ranked = [(team.quota.get(r.name, 0), -index, r.name) for index, r in enumerate(registry.regions)]
    best = max(ranked, default=(0, 0, ""))
    return best[2] if best[0] > 0 else None
