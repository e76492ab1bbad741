"""The cluster path recovers one replica group at a time, on a real Ray cluster of several nodes on this machine.

A head node without CPUs (the driver and the Lighthouse, as the RayJob's head pod) and three worker
nodes, each its own raylet (``ray.cluster_utils.Cluster``, what Ray's own tests use; the same processes
``ray start`` runs). The driver is ``train.py`` as a RayJob runs it, in its own process. One fault per
test: a rank's process SIGKILLed, or a whole node's raylet and its workers.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from trainer.launch.local import after_death
from trainer.launch.ray_supervisor import strategy

from tests.trainer.conftest import events, final, start
from tests.waiting import until

pytestmark = pytest.mark.live  # a local Ray cluster and the driver under it

# Ray marks a node dead after `threshold` failed health checks, `period` apart (GCS defaults 5 and 3 s): about
# 15 s for a killed raylet, whose checks fail at once, up to 65 s for a host that vanishes, each check then
# waiting out its 10 s timeout (ray src/ray/common/ray_config_def.h, src/ray/gcs/gcs_health_check_manager.cc).
# Shorter here so a node loss is seen in about a second.
FAST_HEALTH_CHECKS = {
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_failure_threshold": "3",
    "RAY_health_check_timeout_ms": "500",
}


@contextlib.contextmanager
def local_cluster(*workers: dict[str, Any]) -> Iterator[Any]:
    """The head (0 CPUs: the driver and the Lighthouse, as the RayJob's head pod) and a worker node per
    ``workers`` entry (``Cluster.add_node``'s arguments: ``num_cpus``, ``labels``, ``env_vars``)."""
    from ray.cluster_utils import Cluster

    saved = {k: os.environ.get(k) for k in FAST_HEALTH_CHECKS}
    os.environ.update(FAST_HEALTH_CHECKS)
    found: Any = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        for worker in workers:
            found.add_node(**worker)
        found.wait_for_nodes()
        yield found
    finally:
        found.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The head and three worker nodes of ``request.param`` logical CPUs each (a group's ranks per node)."""
    with local_cluster(*[{"num_cpus": request.param}] * 3) as found:
        yield found


def wait_until(proc: Any, ready: Any, within_s: float, what: str) -> Any:
    return until(ready, within_s, what, proc)


def placement(tmp_path: Path, name: str) -> dict[str, Any]:
    path = tmp_path / "runs" / name / "placement.json"
    return json.loads(path.read_text()) if path.exists() else {}


def supervisor(tmp_path: Path, name: str, event: str) -> list[dict[str, Any]]:
    """The driver's own events of kind ``event`` (supervisor.jsonl)."""
    path = tmp_path / "runs" / name / "supervisor.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [e for e in map(json.loads, lines) if e["event"] == event]


def committed_at(tmp_path: Path, name: str, group: int, step: int) -> bool:
    return any(e["event"] == "commit" and e["step"] >= step for e in events(tmp_path, name, group))


def assert_group_recovery(tmp_path: Path, name: str, out: str, killed_at: float, steps: int) -> None:
    """Only group 1 restarted; group 0 committed every step, some while group 1 was down; 1 healed; same weights."""
    survivor, restarted = events(tmp_path, name, 0), events(tmp_path, name, 1)
    lost = supervisor(tmp_path, name, "lost")  # each loss's reason: what a failure here shows
    assert [e["event"] for e in survivor].count("started") == 1, lost  # never touched
    assert [e["event"] for e in restarted].count("started") == 2, lost
    commits = [e["step"] for e in survivor if e["event"] == "commit"]
    assert commits == list(range(commits[0], steps + 1))  # no gap, no step twice
    back = next(e["time"] for e in restarted if e["event"] == "started" and e["time"] > killed_at)
    alone = [e for e in survivor if e["event"] == "commit" and killed_at < e["time"] < back]
    assert alone, "the survivor committed nothing while the dead group was down"
    assert any(e["event"] == "healed" and e["time"] > killed_at for e in restarted)  # from the live group
    reports = [final(tmp_path, name, g) for g in (0, 1)]
    assert [r["step"] for r in reports] == [steps, steps]
    assert reports[0]["weights"] == reports[1]["weights"]
    # Every group's console reaches the driver's output (what `ray job logs` shows), the survivor's steps too.
    lines = out.splitlines()
    assert sum(line.startswith("replica group 0: training on ") for line in lines) == 1
    assert sum(line.startswith("replica group 1: training on ") for line in lines) == 2, lost
    assert any(line.startswith("replica group 1: lost (") for line in lines)
    assert any(line.startswith("replica group 1: healed from a live group at step ") for line in lines)
    assert f"step {steps}/{steps}" in out
    # Ray adds its own report of a dead raylet on stderr (merged here), after ours too: no "last line" check.
    assert any(line.startswith(f"run {name} completed; goodput {name}: ") for line in lines)
    assert json.loads((tmp_path / "runs" / name / "goodput.json").read_text())["restarts"] == 1


def kill_and_recover(
    cluster: Any, tmp_path: Path, name: str, kill: Callable[[dict[str, Any]], None], *args: str
) -> None:
    """Run `name` under Ray with one spare group, `kill` group 1 once it reached step 8 (given the placement),
    and check that only group 1 restarted, on the spare's node, and healed (assert_group_recovery)."""
    steps = 300
    proc = start(
        tmp_path, name, "run.launcher=ray", f"run.steps={steps}", "ft.spare_groups=1", "ft.restart_delay_s=2",
        "checkpoint.every=20", "run.metrics_port=0", *args, env={"RAY_ADDRESS": cluster.address},
    )  # fmt: skip
    try:
        wait_until(proc, lambda: committed_at(tmp_path, name, 1, 8), 120, "reached step 8")
        before = placement(tmp_path, name)
        kill(before)
        killed_at = time.time()
        out, _ = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 0, out[-3000:]
    assert_group_recovery(tmp_path, name, out, killed_at, steps)
    after = placement(tmp_path, name)
    assert after["0"] == before["0"]
    assert after["1"]["node"] not in (before["0"]["node"], before["1"]["node"])  # the spare's node


def assert_spare_rendezvous_held(tmp_path: Path, name: str, ip: str) -> None:
    """Nothing else of the node can take the spare's rendezvous port while it waits (test_rendezvous_port.py):
    a connection given it made the restarted group fail once more in CI."""
    port = next(e["port"] for e in supervisor(tmp_path, name, "placed") if e["group"] is None)
    with socket.socket() as squatter, pytest.raises(OSError, match="Address already in use"):
        squatter.bind((ip, port))


@pytest.mark.parametrize("cluster", [2], indirect=True)
def test_a_killed_rank_restarts_only_its_group_on_the_spare_and_it_heals(cluster: Any, tmp_path: Path) -> None:
    """2 groups of 2 ranks and one spare group, a node each: rank 1 of group 1 SIGKILLed."""

    def kill_rank(placed: dict[str, Any]) -> None:
        assert_spare_rendezvous_held(tmp_path, "raykill", placed["1"]["ip"])  # every node here is this machine
        os.kill(placed["1"]["pids"][1], signal.SIGKILL)

    kill_and_recover(cluster, tmp_path, "raykill", kill_rank, "ft.group_size=2")


@pytest.mark.parametrize("cluster", [1], indirect=True)
def test_a_lost_node_restarts_only_its_group_on_the_spare_node(cluster: Any, tmp_path: Path) -> None:
    """2 groups of 1 rank and one spare, a node each: group 1's whole node killed (its raylet and workers)."""

    def lose_node(placed: dict[str, Any]) -> None:
        node = next(n for n in cluster.worker_nodes if n.node_id == placed["1"]["node"])
        cluster.remove_node(node, allow_graceful=False)  # SIGKILLs the node's raylet and its processes

    kill_and_recover(cluster, tmp_path, "raynode", lose_node)


def test_placement_and_restart_decisions() -> None:
    assert strategy(8, 8) == "STRICT_PACK"  # a group of one node's GPUs stays on one node
    assert strategy(16, 8) == "PACK"
    # Metrics and Manager ports per group on a node: test_manager_port.py.
    assert after_death(True, 0, 1) == "restart"
    assert after_death(True, 3, 1) == "fail"  # a group that keeps dying is a bug
    assert after_death(False, 0, 1) == "fail"
    assert after_death(True, 0, 3) == "final"  # non-finite: a restart would diverge again
