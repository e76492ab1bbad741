"""Each replica group inside one sub-block under Ray (trainer/launch/subblocks.py, README "Sub-blocks under Ray").

The choice is pure and tested on its own; the placement on a real Ray cluster of nodes labelled in two
sub-blocks (test_ray_groups_recovery.py's local cluster), checked against Ray's own placement group table;
the Kubernetes path (a Ray node's NODE_NAME, then its Node's label) against a local API server.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from trainer.launch.subblocks import SUBBLOCK_LABEL, UNKNOWN, NodeTopology

from contract import incluster
from tests.trainer.conftest import start
from tests.trainer.test_ray_groups_recovery import committed_at, local_cluster, placement, supervisor, wait_until
from tests.waiting import until
from tests.warden.fakes import ApiState, FakeApiServer, node, serving

pytestmark = pytest.mark.live  # a local Ray cluster (the choice itself: test_subblock_choice.py)

# -- the Kubernetes path: NODE_NAME on each Ray node, one GET of its Node -----------------------------


@contextlib.contextmanager
def connected(cluster: Any) -> Iterator[Any]:
    """This test process as a driver of ``cluster``, for Ray's own view (placement groups, node labels)."""
    import ray

    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    try:
        yield ray
    finally:
        ray.shutdown()


class Forbidden(FakeApiServer):
    """The API server's answer to an account without get on nodes."""

    def do_GET(self) -> None:
        self._read()
        message = 'nodes is forbidden: User "system:serviceaccount:team-research:trainer" cannot get resource "nodes"'
        self.send_json(403, {"kind": "Status", "code": 403, "reason": "Forbidden", "message": message})


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    found = [r.getMessage() for r in caplog.records if r.name == "trainer" and r.levelno == logging.WARNING]
    caplog.clear()
    return found


def learned(topology: NodeTopology, workers: list[dict[str, Any]]) -> dict[str, str]:
    """Every node's sub-block, once the driver has read them all."""

    def complete() -> dict[str, str] | None:
        found, missing = topology.learn(workers)
        return None if missing else found

    return until(complete, 60, "learned every node's sub-block")


def test_the_driver_reads_each_ray_nodes_subblock_from_its_kubernetes_node(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = ApiState()
    state.nodes = {
        "gke-a": node("gke-a", metadata={"labels": {SUBBLOCK_LABEL: "sb-1"}}),
        "gke-b": node("gke-b", metadata={"labels": {SUBBLOCK_LABEL: "sb-2"}}),
    }  # gke-c is not there (a 404): that node has no sub-block
    (tmp_path / "token").write_text("trainer-token\n")
    token = str(tmp_path / "token")
    with (
        serving(FakeApiServer, state) as url,
        serving(Forbidden, ApiState()) as refusing,
        local_cluster() as cluster,
        connected(cluster) as ray,
    ):
        # Pods as gkr renders them: NODE_NAME from the downward API, no sub-block label on the Ray node.
        pods = ("gke-a", "gke-b", "gke-c")
        by_id = {cluster.add_node(num_cpus=0, env_vars={"NODE_NAME": n}).node_id: n for n in pods}
        cluster.wait_for_nodes()
        workers = [n for n in ray.nodes() if n["NodeID"] in by_id]
        topology = NodeTopology(ray, incluster.Cluster(api=url, token_file=token))
        assert topology.learn(workers) == ({}, True)  # asked, not answered yet: no placement on a guess
        found = learned(topology, workers)
        assert {by_id[i]: sb for i, sb in found.items()} == {"gke-a": "sb-1", "gke-b": "sb-2", "gke-c": UNKNOWN}
        assert warnings(caplog) == [
            'sub-blocks: GET /api/v1/nodes/gke-c: HTTP 404: {"code": 404}; that node counts as no sub-block'
        ]
        # Without fleet's ClusterRole: no node has a sub-block, said once, and the API is asked no more.
        forbidden = NodeTopology(ray, incluster.Cluster(api=refusing, token_file=token))
        assert learned(forbidden, workers) == dict.fromkeys(by_id, UNKNOWN)
        assert forbidden.cluster is None
    (line,) = warnings(caplog)
    assert line.startswith("sub-blocks: GET /api/v1/nodes/gke-")
    assert 'cannot get resource "nodes"' in line
    assert line.endswith(
        "(the trainer's service account needs get on nodes: fleet's ClusterRole meridian-trainer-node-reader)"
    )
    # One GET per node, by name, with the pod's token: no list, no watch, nothing written.
    assert sorted((r.method, r.path, r.auth) for r in state.requests) == [
        ("GET", f"/api/v1/nodes/{name}", "Bearer trainer-token") for name in pods
    ]


# -- a run on a cluster of two sub-blocks -----------------------------------------------------------


def in_subblock(subblock: str) -> dict[str, Any]:
    return {"num_cpus": 1, "labels": {SUBBLOCK_LABEL: subblock}}


def spanning(where: dict[str, str]) -> list[dict[str, Any]]:
    """Ray's own table: the placed placement groups whose bundles lie in more than one sub-block."""
    from ray.util.placement_group import placement_group_table

    return [
        pg
        for pg in placement_group_table().values()
        if pg["state"] == "CREATED" and len({where[n] for n in pg["bundles_to_node_id"].values()}) > 1
    ]


def placed() -> bool:
    from ray.util.placement_group import placement_group_table

    return any(pg["state"] == "CREATED" for pg in placement_group_table().values())


def test_a_group_lands_in_one_subblock_and_waits_rather_than_span_two(tmp_path: Path) -> None:
    """One group of 2 ranks on one-CPU nodes. a1 and b1: room for it only across the two sub-blocks, so it
    waits; a2 joins a: it trains on a1 + a2; a2 is lost: a1 and b1 are free again, it waits; b2 joins b:
    it trains there to the end. Ray's placement group table shows no group across sub-blocks at any point."""
    name = "raysub"
    with local_cluster() as cluster, connected(cluster):
        where = {cluster.add_node(**in_subblock(sb)).node_id: sb for sb in "ab"}
        cluster.wait_for_nodes()
        proc = start(
            tmp_path, name, "run.launcher=ray", "run.steps=60", "ft.replica_groups=1", "ft.group_size=2",
            "ft.restart_delay_s=2", "checkpoint.every=20", "checkpoint.start_over=true", "run.metrics_port=0",
            env={"RAY_ADDRESS": cluster.address},
        )  # fmt: skip
        try:
            wait_until(proc, lambda: supervisor(tmp_path, name, "waiting") or placed(), 120, "placed or waiting")
            assert spanning(where) == [], "placed across sub-blocks a and b"
            a2 = cluster.add_node(**in_subblock("a"))
            where[a2.node_id] = "a"
            wait_until(proc, lambda: committed_at(tmp_path, name, 0, 3), 120, "trained in sub-block a")
            assert {where[n] for n in placement(tmp_path, name)["0"]["nodes"]} == {"a"}
            cluster.remove_node(a2, allow_graceful=False)
            wait_until(proc, lambda: supervisor(tmp_path, name, "lost"), 120, "saw the loss")  # its old group removed
            wait_until(proc, lambda: len(supervisor(tmp_path, name, "waiting")) == 2 or placed(), 120, "waiting")
            assert spanning(where) == [], "re-placed across sub-blocks a and b"
            b2 = cluster.add_node(**in_subblock("b"))
            where[b2.node_id] = "b"
            out, _ = proc.communicate(timeout=300)
        finally:
            proc.kill()
    assert proc.returncode == 0, out[-3000:]
    timeline = supervisor(tmp_path, name, "placed")
    assert [sorted(where[n] for n in e["nodes"]) for e in timeline] == [["a", "a"], ["b", "b"]]
    assert [e["subblock"] for e in timeline] == ["a", "b"]
    assert len(supervisor(tmp_path, name, "lost")) == 1
    assert "replica group 0: waiting for 2 free slot(s) in one sub-block" in out
