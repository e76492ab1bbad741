"""Defaults follow one rule, whatever the state of the registry cache."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from click.testing import Result

from gkr.defaults import default_region
from gkr.registry import from_json, load, to_json
from tests.conftest import SHIPPED

ARGS = ("submit", "--name", "exp-1", "--team", "research", "--pods", "2", "--dry-run", "--", "python", "train.py")


def test_cold_and_warm_cache_target_the_same_cluster(gkr: Callable[..., Result]) -> None:
    cold = gkr(*ARGS)  # builds the registry from fleet.yaml and caches it
    warm = gkr(*ARGS)  # reads the cached JSON
    assert cold.exit_code == warm.exit_code == 0, cold.stderr + warm.stderr
    assert (cold.stdout, cold.stderr) == (warm.stdout, warm.stderr)
    # research's largest quota is us-central1 (1,024 GPUs); the summary names the context it will use.
    assert "-> gke_meridian-train-prod_us-central1_meridian-us-central1 " in cold.stderr


def test_largest_quota_wins_ties_by_fleet_order() -> None:
    registry = load(SHIPPED)
    teams = {t.name: t for t in registry.teams}
    assert [r.name for r in registry.regions] == ["us-central1", "us-east4", "europe-west1"]
    assert default_region(registry, teams["research"]) == "us-central1"
    # A tie between us-east4 and europe-west1: us-east4 comes first in fleet.yaml, in any quota order.
    tied = replace(teams["evals"], quota={"europe-west1": 256, "us-east4": 256, "us-central1": 0})
    assert default_region(registry, tied) == "us-east4"
    assert default_region(from_json(to_json(registry)), tied) == "us-east4"
    assert default_region(registry, replace(tied, quota={})) is None


def test_summary_names_the_context_given(gkr: Callable[..., Result]) -> None:
    result = gkr(*ARGS[:-3], "--context", "my-proxy", "--dry-run", "--", "python", "train.py")
    assert result.exit_code == 0, result.stderr
    assert result.stderr.startswith("rayjob exp-1 -> my-proxy (namespace team-research")
