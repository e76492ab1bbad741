"""Defaults follow one rule, whatever the order a registry's JSON holds its mappings in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from click.testing import Result

from contract import registry as contract
from gkr.defaults import default_region
from tests.gkr.conftest import shipped

ARGS = ("submit", "--name", "exp-1", "--team", "research", "--pods", "2", "--dry-run", "--", "python", "train.py")


def test_the_default_region_is_the_teams_largest_quota(gkr: Callable[..., Result]) -> None:
    first, again = gkr(*ARGS), gkr(*ARGS)
    assert first.exit_code == again.exit_code == 0, first.stderr + again.stderr
    assert (first.stdout, first.stderr) == (again.stdout, again.stderr)
    # research's largest quota is us-central1 (1,024 GPUs); the summary names the context it will use.
    assert "-> gke_meridian-train-prod_us-central1_meridian-us-central1 " in first.stderr


def test_largest_quota_wins_ties_by_fleet_order() -> None:
    registry = shipped().registry
    teams = {t.name: t for t in registry.teams}
    assert [r.name for r in registry.regions] == ["us-central1", "us-east4", "europe-west1"]
    assert default_region(registry, teams["research"]) == "us-central1"
    # A tie between us-east4 and europe-west1: us-east4 comes first in fleet.yaml, in any quota order.
    tied = replace(teams["evals"], quota={"europe-west1": 256, "us-east4": 256, "us-central1": 0})
    assert default_region(registry, tied) == "us-east4"
    assert default_region(contract.loads(contract.dumps(registry), "registry.json"), tied) == "us-east4"
    assert default_region(registry, replace(tied, quota={})) is None


def test_summary_names_the_context_given(gkr: Callable[..., Result]) -> None:
    result = gkr(*ARGS[:-3], "--context", "my-proxy", "--dry-run", "--", "python", "train.py")
    assert result.exit_code == 0, result.stderr
    assert result.stderr.startswith("rayjob exp-1 -> my-proxy (namespace team-research")
