"""Quota plan: every team's quota splits exactly over the pools it may use, in whole nodes, or is refused."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.cli import main
from fleet.gitops.kueue import kueue_objects
from fleet.load import load
from fleet.model import Fleet
from fleet.quotaplan import GPU, plan_quotas
from tests.conftest import SHIPPED_SPEC

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NODE = 8  # a3-ultragpu-8g


def _europe_quotas(spec: dict[str, Any], pretraining: int, research: int, evals: int) -> None:
    for team, quota in zip(spec["teams"], (pretraining, research, evals), strict=True):
        team["quota"]["europe-west1"] = quota


def _plan_line(file: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["plan", "--fleet", str(file)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    return line


def _research_above_its_pools(spec: dict[str, Any]) -> None:
    # h200-a (2,048 GPUs) is pretraining's alone; research reaches only h200-spot (1,024). The region's total
    # (1,024 + 2,000 + 0 of 3,072) fits, which is all the spec used to be checked for: it loaded, and the
    # ClusterQueue quietly held 1,024.
    _europe_quotas(spec, 1024, 2000, 0)


def _evals_not_whole_nodes(spec: dict[str, Any]) -> None:
    spec["teams"][2]["quota"]["us-east4"] = 100


@pytest.mark.parametrize(
    ("mutate", "ending"),
    [
        (
            _research_above_its_pools,
            ": teams[1].quota.europe-west1: quota of 2,000 GPUs is above the 1,024 GPUs team research may use in "
            "europe-west1 (h200-spot; not h200-a (pretraining's)); lower it to 1,024 or add pools",
        ),
        (
            _evals_not_whole_nodes,
            ": teams[2].quota.us-east4: quota of 100 GPUs is not whole nodes of 8 GPUs (h200-a); "
            "raise it to 104 or lower it to 96",
        ),
    ],
    ids=["above-its-pools", "not-whole-nodes"],
)
def test_a_quota_the_pools_cannot_hold_is_one_line(
    spec: dict[str, Any],
    write_spec: Callable[[dict[str, Any]], Path],
    capsys: pytest.CaptureFixture[str],
    mutate: Callable[[dict[str, Any]], None],
    ending: str,
) -> None:
    mutate(spec)
    file = write_spec(spec)
    line = _plan_line(file, capsys)
    assert line.startswith(f"error: {file}:")
    assert line.endswith(ending)


def test_shared_pools_oversubscribed_beyond_the_teams_own_is_one_line(
    spec: dict[str, Any], write_spec: Callable[[dict[str, Any]], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # 2,304 of 3,072 GPUs in all, but pretraining leaves half of its own pool idle and the others need
    # 1,280 of the 1,024 shared.
    _europe_quotas(spec, 1024, 1024, 256)
    line = _plan_line(write_spec(spec), capsys)
    assert ": regions[2].name: beyond their own pools, teams' quotas in europe-west1 need 1,280 GPUs" in line


def test_research_at_what_its_pools_hold_splits_exactly(
    spec: dict[str, Any], write_spec: Callable[[dict[str, Any]], Path]
) -> None:
    _europe_quotas(spec, 2048, 1024, 0)
    loaded = load(write_spec(spec))
    assert loaded.quotas.team("europe-west1", "research").pools == {"h200-spot": 1024}
    europe = loaded.fleet.regions[2]
    (queue,) = [
        o
        for o in kueue_objects(loaded.fleet, europe, loaded.quotas)
        if o["kind"] == "ClusterQueue" and o["metadata"]["name"] == "research"
    ]
    gpu_flavors = [f for f in queue["spec"]["resourceGroups"][0]["flavors"] if f["name"] != "cpu"]
    assert sum(r["nominalQuota"] for f in gpu_flavors for r in f["resources"] if r["name"] == GPU) == 1024


def test_the_shipped_plan_holds_every_quota() -> None:
    loaded = load(Path(__file__).parents[2] / "fleet.yaml")
    for team in loaded.fleet.teams:
        for region in loaded.fleet.regions:
            assert loaded.quotas.team(region.name, team.name).gpus == team.quota.get(region.name, 0)


@st.composite
def region_quotas(draw: st.DrawFn) -> dict[str, Any]:
    """us-central1 with random pools, shared or dedicated, and teams with random quotas, valid or not."""
    teams = [f"team{n}" for n in range(draw(st.integers(1, 4)))]
    zones = SHIPPED_SPEC["regions"][0]["zones"]
    pools = [
        {
            "name": f"pool-{n}",
            "machine_type": "a3-ultragpu-8g",
            "zone": draw(st.sampled_from(zones)),
            "nodes": draw(st.integers(1, 200)),
            "capacity": {"mode": "on_demand"},
            **({"team": owner} if (owner := draw(st.sampled_from([None, *teams]))) else {}),
        }
        for n in range(draw(st.integers(1, 4)))
    ]
    held = sum(p["nodes"] for p in pools) * NODE
    whole = draw(st.booleans())  # mostly whole nodes, so that many examples are valid
    quotas = [
        draw(st.integers(0, held // NODE // len(teams) + 2)) * NODE if whole else draw(st.integers(0, held))
        for _ in teams
    ]
    spec = copy.deepcopy(SHIPPED_SPEC)
    spec["regions"] = [{**spec["regions"][0], "gpu_pools": pools}]
    spec["teams"] = [
        {**spec["teams"][0], "name": t, "group": f"{t}@meridian.example.com", "quota": {"us-central1": q}}
        for t, q in zip(teams, quotas, strict=True)
    ]
    return spec


@SETTINGS
@given(region_quotas())
def test_shares_add_up_to_the_quota_fit_the_pools_and_are_whole_nodes_or_the_spec_is_refused(
    spec: dict[str, Any],
) -> None:
    fleet = Fleet.model_validate(spec)
    plan, problems = plan_quotas(fleet)
    (region,) = fleet.regions
    capacity = {p.name: p.nodes * NODE for p in region.gpu_pools}
    usable = {t.name: sum(capacity[p.name] for p in region.gpu_pools if p.team in (None, t.name)) for t in fleet.teams}
    quotas = {t.name: t.quota["us-central1"] for t in fleet.teams}
    refused = {p.path[1] for p in problems if p.path[0] == "teams"}
    for i, team in enumerate(fleet.teams):  # what cannot fit one team is always reported, at its quota
        if quotas[team.name] > usable[team.name] or quotas[team.name] % NODE:
            assert i in refused
    # With one node size the checks are complete: the split never comes up short on its own.
    assert not [p for p in problems if "cannot be split" in p.message]
    if problems:
        return
    used = dict.fromkeys(capacity, 0)
    for team in fleet.teams:
        shares = plan.team("us-central1", team.name)
        assert sum(shares.pools.values()) == shares.gpus == quotas[team.name]
        assert all(gpus % NODE == 0 for gpus in shares.pools.values())
        assert all(shares.nominal[pool][GPU] == gpus for pool, gpus in shares.pools.items())
        for pool, gpus in shares.pools.items():
            used[pool] += gpus
    assert all(used[p] <= capacity[p] for p in capacity)
