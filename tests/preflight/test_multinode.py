"""The all-reduce with peers: the plan and the judgement (pure, injected numbers), and real gloo processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from preflight import multinode
from preflight.collective import CollectiveSettings, Measurement
from tests.ports import free_port

PREFLIGHT = Path(sys.executable).parent / "preflight"


def test_every_participant_derives_the_same_layout_from_the_same_set() -> None:
    a = multinode.plan("node-b", ["node-c", "node-a"], per_node=8)
    b = multinode.plan("node-a", ["node-b", "node-c", "node-a"], per_node=8)  # its own name listed too
    assert (a.master, a.node_rank, a.nodes, a.world) == ("node-a", 1, 3, 24)
    assert (b.master, b.node_rank) == ("node-a", 0)


@pytest.mark.parametrize(
    ("me", "peers", "message"),
    [
        ("node-a", [], "--peers: name at least one peer besides this node"),
        ("node-a", ["node-a"], "--peers: name at least one peer besides this node"),
        ("node-a", ["bad name"], "--peers/--self: 'bad name' is not a host name or IPv4 address"),
        ("node-a", ["-x"], "--peers/--self: '-x' is not a host name or IPv4 address"),
        ("node-a", [f"n{i}" for i in range(64)], "--peers: 65 nodes, at most 64"),
    ],
)
def test_bad_peer_lists_are_one_line(me: str, peers: list[str], message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)") + "$"):
        multinode.plan(me, peers)


def _measured(busbw_at_peak: float) -> list[Measurement]:
    return [Measurement(1 << 20, 1e-4, 10.0, 15.0), Measurement(256 << 20, 1e-3, busbw_at_peak / 1.5, busbw_at_peak)]


def test_the_floor_is_judged_at_the_largest_size() -> None:
    layout = multinode.plan("a", ["b"], per_node=8)
    sizes = (1 << 20, 256 << 20)
    low = multinode.verdict(_measured(200.0), "nccl", layout, 256.0, sizes)
    assert (low.name, low.status) == ("nccl-multinode", "fail")
    assert low.summary == "2 nodes x 8 rank(s) over nccl: busbw 200.00 GB/s at 256 MiB, below 256 GB/s"
    good = multinode.verdict(_measured(300.0), "nccl", layout, 256.0, sizes)
    assert good.status == "pass"
    assert good.summary.endswith("(threshold 256 GB/s)")
    assert multinode.verdict(_measured(1.0), "gloo", layout, None, sizes).summary.endswith("(no threshold given)")


def test_no_peers_is_skipped() -> None:
    result = multinode.check("a", [], CollectiveSettings(None), {})
    assert result.status == "skip"


def _run(me: str, peer: str, port: int, timeout: str = "120") -> subprocess.Popen[str]:
    args = [
        str(PREFLIGHT),
        "run",
        "--check",
        "nccl-multinode",
        "--self",
        me,
        "--peers",
        peer,
        "--peer-port",
        str(port),
        "--peer-timeout",
        timeout,
        "--sizes",
        "65536,1048576",
        "--min-busbw-gbps",
        "1e-6",
        "--json",
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_nodes_on_loopback_over_gloo() -> None:
    """Two participants, each told of the other (127.0.0.1 and 127.0.0.2 are both this machine's loopback)."""
    port = free_port()
    procs = [_run("127.0.0.1", "127.0.0.2", port), _run("127.0.0.2", "127.0.0.1", port)]
    checks = []
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
        checks.append(json.loads(out)["checks"][0])
    assert {c["name"] for c in checks} == {"nccl-multinode"}
    assert {c["status"] for c in checks} == {"pass"}
    assert checks[0]["summary"].startswith("2 nodes x 1 rank(s) over gloo: busbw ")
    # Both report the slowest rank's time, so the same numbers.
    assert checks[0]["evidence"] == checks[1]["evidence"]


def test_a_peer_that_never_comes_ends_at_the_timeout() -> None:
    proc = _run("127.0.0.1", "127.0.0.2", free_port(), timeout="3")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2
    check = json.loads(out)["checks"][0]
    assert check["status"] == "error"
    assert check["summary"].startswith("the all-reduce with 1 peer(s) did not finish within 3 s")


def test_a_rank_that_fails_is_reported_with_its_reason_not_waited_for() -> None:
    layout = multinode.Plan("127.0.0.1", free_port(), node_rank=0, nodes=1, per_node=1)
    result = multinode.launch(layout, CollectiveSettings(None, sizes=(-4,)), timeout_s=120)
    assert result.status == "error"
    assert result.summary.startswith("the all-reduce could not run: ")
    assert "RuntimeError: Trying to create tensor with negative dimension" in result.summary
