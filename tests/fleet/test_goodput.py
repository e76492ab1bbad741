"""The fleet goodput model (`meridian goodput`): the simulation's invariants, Warden's policy in it, the CLI."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from contract.spares import default_spare_groups
from contract.warden import Config
from fleet.cli import main
from fleet.goodput.costs import ACTOR_RESTART_S, RESTART_TO_HEAL_S, Costs, repair_s, slots
from fleet.goodput.failures import CAUSES, per_node_second
from fleet.goodput.jobs import CROSS_REGION, jobs_of
from fleet.goodput.report import GOAL
from fleet.goodput.simulate import BUCKETS, simulate
from fleet.goodput.sweep import INTERVALS, best, mean, run_of, young_daly_s
from fleet.load import load
from tests.conftest import SHIPPED

COSTS = Costs()
SHIPPED_JOBS, SHIPPED_CROSS = jobs_of(load(SHIPPED).fleet, COSTS)
JOB = SHIPPED_JOBS[0]  # us-central1's h200-a: 384 nodes
CAUSE = {c.component: c for c in CAUSES}


def test_failure_rates_are_the_llama3_tables() -> None:
    assert sum(c.count for c in CAUSES) == 419
    assert math.isclose(per_node_second(), 419 / 2048 / (54 * 86_400))


def test_the_shipped_fleets_largest_jobs() -> None:
    assert [(j.name, j.pools, j.nodes, j.gpus) for j in SHIPPED_JOBS] == [
        ("us-central1", ("us-central1/h200-a",), 384, 3072),
        ("us-east4", ("us-east4/h200-a",), 384, 3072),
        ("europe-west1", ("europe-west1/h200-a",), 256, 2048),
    ]
    assert SHIPPED_CROSS is not None
    assert SHIPPED_CROSS.name == CROSS_REGION
    assert SHIPPED_CROSS.nodes == 1024
    assert SHIPPED_CROSS.slots == 6


def test_repair_times_follow_wardens_policy() -> None:
    config = Config(drain_grace_s=600.0)
    # Xid 79: Warden reports the host, waits for the report's operation (issue 38), then recreates the VM.
    replaced = 600 + COSTS.faulty_report_wait_s + COSTS.replace_s + COSTS.probation_s
    assert repair_s(CAUSE["Faulty GPU"], config, COSTS) == replaced
    assert repair_s(CAUSE["GPU HBM3 Memory"], config, COSTS) == 600 + COSTS.reboot_s + COSTS.probation_s
    assert repair_s(CAUSE["NIC"], config, COSTS) == 600 + COSTS.review_s + COSTS.replace_s + COSTS.probation_s
    assert repair_s(CAUSE["Software Bug"], config, COSTS) == 0  # the node stays in service
    assert repair_s(CAUSE["SSD"], config, COSTS) == COSTS.gke_autorepair_s + COSTS.replace_s  # GKE's, not Warden's
    # The fleet's overrides reach the model: Xid 79 held for review instead, a longer drain.
    override = Config(drain_grace_s=900.0, xid_actions={79: "review"})
    assert repair_s(CAUSE["Faulty GPU"], override, COSTS) == 900 + COSTS.review_s + COSTS.replace_s + 300
    dry = replace(config, dry_run=True)
    assert repair_s(CAUSE["GPU HBM3 Memory"], dry, COSTS) == 600 + COSTS.review_s + COSTS.replace_s + 300


def test_a_new_fleets_warden_repairs_unambiguous_faults_and_leaves_the_rest_to_a_person() -> None:
    config = Config(drain_grace_s=600.0)  # the default: act_on unambiguous
    assert repair_s(CAUSE["Host Maintenance"], config, COSTS) == 600 + COSTS.reboot_s + COSTS.probation_s
    assert repair_s(CAUSE["GPU System Processor"], config, COSTS) == 600 + COSTS.reboot_s + COSTS.probation_s
    # A failed check (silent data corruption) calls for a reboot, but is not unambiguous: logged, a person acts.
    review = 600 + COSTS.review_s + COSTS.replace_s + COSTS.probation_s
    assert repair_s(CAUSE["Silent Data Corruption"], config, COSTS) == review
    everything = replace(config, act_on="all")
    assert repair_s(CAUSE["Silent Data Corruption"], everything, COSTS) == 600 + COSTS.reboot_s + 300


def test_repair_slots_are_wardens_caps_and_breaker() -> None:
    assert slots(Config(), 384) == 2  # max_per_pool
    assert slots(Config(max_per_pool=50), 384) == 8  # max_per_cluster
    assert slots(Config(max_per_pool=50, max_per_cluster=50), 100) == 5  # 5% of the pool
    assert slots(Config(), 8) == 1  # the breaker never rounds down to zero


def test_deterministic_for_a_seed_and_every_gpu_second_counted() -> None:
    run = run_of(COSTS, "live", 3600.0, 30)
    first, again, other = simulate(JOB, run, 3), simulate(JOB, run, 3), simulate(JOB, run, 4)
    assert first.buckets == again.buckets
    assert first.interruptions == again.interruptions
    assert first.buckets != other.buckets
    for mode in ("live", "restart"):
        result = simulate(JOB, run_of(COSTS, mode, 3600.0, 30), 3)
        assert math.isclose(sum(result.buckets.values()), result.paid, rel_tol=1e-9)
        assert all(result.buckets[b] >= 0 for b in BUCKETS)


@pytest.mark.parametrize("spares", [0, 8])
def test_without_failures_only_checkpoints_and_spares_cost(spares: int) -> None:
    job = replace(JOB, spares=spares)
    for mode in ("live", "restart"):
        run = run_of(COSTS, mode, 1800.0, 30, failure_scale=0.0)
        overhead = COSTS.blocked_s / (1800.0 + COSTS.blocked_s)
        expected = (1 - overhead) * job.target / job.nodes
        assert math.isclose(simulate(job, run, 0).goodput, expected, rel_tol=1e-12)


def test_goodput_falls_as_failures_rise() -> None:
    for mode in ("live", "restart"):
        goodputs = [mean(JOB, run_of(COSTS, mode, 1800.0, 30, scale), range(3)).goodput for scale in (0.5, 1, 2, 4)]
        assert goodputs == sorted(goodputs, reverse=True)
        assert len(set(goodputs)) == 4


def test_live_recovery_beats_restarting_the_job() -> None:
    for job in [*SHIPPED_JOBS, SHIPPED_CROSS]:
        assert job is not None
        live = mean(job, run_of(COSTS, "live", 1800.0, 30), range(3)).goodput
        restart = mean(job, run_of(COSTS, "restart", 1800.0, 30), range(3)).goodput
        assert live > restart + 0.02, job.name


def test_the_best_interval_is_near_young_daly() -> None:
    """Young/Daly is a first-order optimum; the simulation's is found on a grid four to a doubling.

    Tolerance: within a factor 1.5 of Young/Daly, and Young/Daly's interval loses under 0.1 points of goodput.
    """
    job = replace(JOB, spares=4)  # a spare at hand: restarts do not wait for repairs
    est = best(job, COSTS, "restart", 120, range(4))
    assert 1 / 1.5 < est.interval_s / est.young_daly_s < 1.5, (est.interval_s, est.young_daly_s)
    nearest = min(INTERVALS, key=lambda i: abs(math.log(i / est.young_daly_s)))
    at_young_daly = mean(job, run_of(COSTS, "restart", nearest, 120), range(4)).goodput
    assert est.result.goodput - at_young_daly < 0.001
    assert young_daly_s(12.0, 86_400.0) == pytest.approx(math.sqrt(2 * 12 * 86_400))


def test_spares_shorten_the_wait_for_repairs() -> None:
    without = mean(JOB, run_of(COSTS, "restart", 1800.0, 30), range(3))
    with_spares = mean(replace(JOB, spares=2), run_of(COSTS, "restart", 1800.0, 30), range(3))
    assert with_spares.buckets["waiting"] < without.buckets["waiting"] / 5


def test_cli_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["goodput", "--fleet", str(SHIPPED), "--days", "5", "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    assert "us-central1" in out
    assert "cross-region" in out
    assert "goal of 97%" in out
    assert main(["goodput", "--fleet", str(SHIPPED), "--days", "5", "--seeds", "1", "--json", "--seed", "3"]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert list(data["fleet"]) == ["shipped", "fail-fast", "restart", "live", "dry-run"]
    assert data["seeds"] == [3]
    assert [j["name"] for j in data["jobs"]] == ["us-central1", "us-east4", "europe-west1"]
    assert data["costs"]["blocked_s"] == pytest.approx(COSTS.blocked_s)


@pytest.mark.parametrize(
    "args",
    [
        ["--days", "0"],
        ["--days", "nan"],
        ["--days", "1e9"],
        ["--seeds", "x"],
        ["--spares", "-1"],
        ["--spares", "999"],
        ["--seed", "9" * 5000],
    ],
)
def test_cli_bad_numbers_are_one_line(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["goodput", "--fleet", str(SHIPPED), *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1


def test_cli_spares_beyond_a_pools_groups_are_one_line(
    spec: dict[str, Any], write_spec: Callable[[dict[str, Any]], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """contract.spares' bound, per pool: 64 spares among 100 nodes would leave 36 groups to train."""
    pool = spec["regions"][1]["gpu_pools"][0]  # its region's one GPU pool
    pool["nodes"] = 100
    for team in spec["teams"]:
        team["quota"] = {}  # the teams' quotas would not fit the smaller pool; the model does not read them
    path = write_spec(spec)
    assert main(["goodput", "--fleet", str(path), "--spares", "64"]) == 2
    captured = capsys.readouterr()
    where = f"{spec['regions'][1]['name']}/{pool['name']}"
    assert captured.err == f"error: --spares: pool {where}: 64 among 100 nodes leave 36 groups to train; use 0 to 50\n"
    assert captured.out == ""


def test_cli_fleet_without_gpu_pools(
    spec: dict[str, Any], write_spec: Callable[[dict[str, Any]], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    for region in spec["regions"]:
        region["gpu_pools"] = []
    for team in spec["teams"]:
        team["quota"] = {}
    path = write_spec(spec)
    code = main(["goodput", "--fleet", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    assert "no GPU pools" in err
    assert len(err.strip().splitlines()) == 1


def test_gkrs_default_spares_are_the_shipped_paths() -> None:
    assert [default_spare_groups(g) for g in (1, 255, 256, 384, 1023, 1024, 10**6)] == [0, 0, 1, 1, 1, 2, 64]
    shipped, cross = jobs_of(load(SHIPPED).fleet, COSTS, spares=None)
    assert [j.spares for j in shipped] == [1, 1, 1]
    assert cross is not None
    assert cross.spares == 3  # each region's RayJob holds its own (gkr's multiregion), not 1,024 nodes' default


def test_the_shipped_path_comes_first_and_meets_the_goal(capsys: pytest.CaptureFixture[str]) -> None:
    """`meridian goodput` as documented (30 days, seeds 0-4) on the shipped fleet.yaml: deterministic."""
    assert main(["goodput", "--fleet", str(SHIPPED), "--json"]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    rows = [r["name"] for r in data["rows"]]
    assert rows == ["shipped", "fail-fast", "restart", "live", "dry-run"]  # the comparisons stay
    assert data["rows"][0]["title"].startswith("shipped: gkr -> RayJob -> per-group supervisor, spares 1/1/1")
    assert "Warden acts on unambiguous" in data["rows"][0]["title"]
    assert data["fleet"]["shipped"] >= GOAL
    assert data["fleet"]["fail-fast"] < GOAL  # Kueue's default: a node leaving the RayJob evicts it
    assert data["fleet"]["restart"] < GOAL
    assert data["fleet"]["dry-run"] < data["fleet"]["restart"]
    assert [j["spares"]["shipped"] for j in data["jobs"]] == [1, 1, 1]
    # Fed by the trainer's measured recovery (scripts/bench_trainer.py --only ray_recover, CPU medians).
    assert data["costs"]["restart_to_heal_s"] == RESTART_TO_HEAL_S
    assert data["costs"]["actor_restart_s"] == ACTOR_RESTART_S
    assert main(["goodput", "--fleet", str(SHIPPED), "--days", "5", "--seeds", "1"]) == 0
    table = capsys.readouterr().out.splitlines()
    first = table[3].split()  # the title, a blank line, the header, then the first job's first row
    assert (first[0], first[3]) == ("us-central1", "shipped")
