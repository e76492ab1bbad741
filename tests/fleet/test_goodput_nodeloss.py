"""A node lost under a running RayJob (issue 38): the path layer by layer, and its cost in `meridian goodput`.

The simulation tests replace the random failures with chosen ones (a host that vanishes at a given time), so
every bucket can be checked against the stages' sum.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest

import fleet.goodput.simulate as simulate_module
from contract.warden import Config
from fleet.cli import main
from fleet.controllers import sources, versions
from fleet.goodput import nodeloss
from fleet.goodput.costs import Costs
from fleet.goodput.failures import CAUSES
from fleet.goodput.jobs import Effect, Job
from fleet.goodput.nodeloss import kueue_failed_s, vanished_host
from fleet.goodput.simulate import Result, simulate
from fleet.goodput.sweep import FAIL_FAST, SHIPPED, Row, rows_of, run_of
from fleet.load import load
from tests.conftest import SHIPPED as SHIPPED_FLEET

COSTS = Costs()
CAUSE = {c.component: c for c in CAUSES}
ROWS = {r.name: r for r in rows_of(load(SHIPPED_FLEET).fleet, COSTS)}
HEAL = COSTS.supervised_heal_s  # the shipped row's group restart: on the spare, no new pod
DAY = 86_400.0
GPUS = 8


def test_ray_marks_a_vanished_host_dead_after_up_to_65_s() -> None:
    """5 failed checks, each waiting out its 10 s timeout, the next 3 s after a failure (not 3 s x 5 = 15 s)."""
    assert COSTS.ray_node_death_s == 5 * (10 + 3) == 65


def test_kueue_marks_the_node_failed_when_it_leaves_the_assignment() -> None:
    config = Config(drain_grace_s=600.0)  # acts on unambiguous faults, as a new fleet does
    assert kueue_failed_s(CAUSE["Power Supply"], config, COSTS) == 50 + 300  # NotReady, then the taint eviction
    assert kueue_failed_s(CAUSE["Faulty GPU"], config, COSTS) == 0  # Warden cordons and evicts at once
    assert kueue_failed_s(CAUSE["NIC"], config, COSTS) == COSTS.review_s  # held with its pods until a person acts
    assert kueue_failed_s(CAUSE["Software Bug"], config, COSTS) is None  # the node stays in service
    assert kueue_failed_s(CAUSE["NCCL Watchdog Timeouts"], config, COSTS) is None


def test_the_shipped_path_costs_one_group_the_sum_of_its_stages() -> None:
    path = vanished_host(COSTS, Config(drain_grace_s=600.0))
    assert [s.layer for s in path.group] == ["Ray", "trainer", "trainer", "torchft"]
    expected = [65, 65 + 4.23, 65 + 4.23 + 60, 65 + HEAL]
    assert [s.at_s for s in path.group] == pytest.approx(expected)
    assert path.group_down_s == pytest.approx(65 + HEAL)
    assert [(s.layer, s.at_s) for s in path.node] == [
        ("Kubernetes", 50),  # Ready Unknown after the node monitor grace period
        ("Kubernetes", 350),  # the taint eviction after tolerationSeconds 300: the pod is Terminating
        ("KubeRay", 350),  # which KubeRay still counts: no replacement pod
        ("Kueue", 350),  # the node marked failed as its pod terminates
        ("GKE", 1200),  # auto-repair: NotReady 600 s, then the VM recreated (600 s)
        ("Kueue", 1200),
        ("Kubernetes", 1260),  # the replacement pod runs
        ("Ray", 1270),  # and its worker has joined: a spare again
    ]
    assert path.group_down_without_spare_s == pytest.approx(1270 + HEAL)
    # Kueue's default FailFast: the gang evicted at the mark, readmitted whole, restarted.
    assert [s.at_s for s in path.fail_fast] == [350, 1200, 1800]
    assert path.gang_down_s == 1450


def _loss() -> Effect:
    job = ROWS[SHIPPED].regional[0]
    return next(e for e in job.effects if e.cause.component == "Power Supply")


def _run(monkeypatch: pytest.MonkeyPatch, row: Row, at: list[float]) -> tuple[Job, Result]:
    """The row's us-central1 job (384 nodes, gkr's one spare) for a day, losing a host at each time in `at`."""
    loss = _loss()
    monkeypatch.setattr(simulate_module, "failures", lambda *_: [(t, 0.0, loss) for t in at])
    job = row.regional[0]
    return job, simulate(job, run_of(row.costs, row.mode, 3600.0, 1, kueue=row.kueue), 0)


def test_a_lost_host_costs_the_shipped_run_one_group(monkeypatch: pytest.MonkeyPatch) -> None:
    job, result = _run(monkeypatch, ROWS[SHIPPED], [10_000.0])
    b = result.buckets
    assert (job.nodes, job.spares) == (384, 1)
    assert b["restart"] == pytest.approx((65 + HEAL) * GPUS)  # Ray's detection, then the spare's heal
    assert b["detect"] == pytest.approx((job.target - 1) * COSTS.detect_s * GPUS)  # torchft's stall only
    assert b["replayed"] == b["waiting"] == 0  # no gang restart
    assert b["repair"] == pytest.approx(1270 * GPUS)  # until the node's new worker has joined
    assert b["spare"] == pytest.approx((DAY - 1270) * GPUS)
    assert math.isclose(sum(b.values()), result.paid, rel_tol=1e-12)


def test_under_kueues_fail_fast_a_lost_host_evicts_the_gang(monkeypatch: pytest.MonkeyPatch) -> None:
    job, result = _run(monkeypatch, ROWS[FAIL_FAST], [10_000.0])
    b = result.buckets
    assert b["replayed"] > 0  # the work since the durable checkpoint, done again
    assert b["waiting"] == pytest.approx((1200 - 350) * (job.nodes - 1) * GPUS)  # requeued until the pool is whole
    assert b["restart"] == pytest.approx((65 + HEAL + job.target * COSTS.job_restart_s) * GPUS)
    assert b["repair"] == pytest.approx(1200 * GPUS)
    assert math.isclose(sum(b.values()), result.paid, rel_tol=1e-12)


def test_a_second_failed_node_evicts_the_gang_even_without_fail_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kueue holds one failed node per Workload: another while the first is still marked evicts it."""
    _, apart = _run(monkeypatch, ROWS[SHIPPED], [10_000.0, 12_000.0])  # the first is back by then
    assert apart.buckets["replayed"] == apart.buckets["waiting"] == 0
    _, close = _run(monkeypatch, ROWS[SHIPPED], [10_000.0, 10_100.0])  # the first still marked at 10,450 s
    assert close.buckets["replayed"] > 0
    assert close.buckets["waiting"] == pytest.approx((11_200 - 10_450) * (384 - 2) * GPUS + 100 * (384 - 1) * GPUS)


def test_cli_shows_the_node_loss_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["goodput", "--fleet", str(SHIPPED_FLEET), "--days", "2", "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    assert "node lost under a running RayJob" in out
    for stage in (
        "t+   65 s  Ray        the GCS marks the node dead",
        "t+  350 s  Kubernetes the taint eviction deletes the pod",
        "t+  350 s  KubeRay    counts the Terminating pod as running",
        "t+  350 s  Kueue      marks the node failed",
        "t+1,200 s  GKE        auto-repair has recreated the VM",
        "t+1,270 s  Ray        its worker joins",
        "t+  350 s  Kueue      no free node in the sub-block: the whole RayJob is evicted",
    ):
        assert stage in out, stage
    assert "one group down 214 s with the run's spare (1,419 s without one), not the gang" in out
    assert "every group down 1,450 s" in out
    assert main(["goodput", "--fleet", str(SHIPPED_FLEET), "--days", "2", "--seeds", "1", "--json"]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    path = data["node_loss"]
    assert path["group_down_s"] == pytest.approx(65 + HEAL)
    assert path["gang_down_s"] == 1450
    assert [s["layer"] for s in path["node"]][:4] == ["Kubernetes", "Kubernetes", "KubeRay", "Kueue"]
    assert {r["name"]: r["kueue"] for r in data["rows"]}[FAIL_FAST] == "fail-fast"
    assert data["fleet"][FAIL_FAST] < data["fleet"][SHIPPED]


def test_the_health_check_timings_are_the_pinned_rays() -> None:
    """The three defaults as the installed Ray reports them: the lock's build of the version the model read."""
    import ray
    from ray._raylet import Config as RayConfig  # type: ignore[attr-defined]  # compiled: no stub names it

    costs = Costs()
    assert ray.__version__ == versions.READ_AT["ray"]
    assert RayConfig.health_check_failure_threshold() == costs.ray_health_check_failures
    assert RayConfig.health_check_timeout_ms() == costs.ray_health_check_timeout_s * 1000
    assert RayConfig.health_check_period_ms() == costs.ray_health_check_period_s * 1000


def test_every_layer_names_its_cited_sources() -> None:
    cited = set(re.findall(r"\[([a-z-]+)\]", nodeloss.__doc__ or ""))
    assert cited == {k for k in sources.BEHAVIOURS if k.startswith(("ray-", "kuberay-", "kueue-"))}
