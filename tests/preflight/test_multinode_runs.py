"""preflight's multi-node all-reduce as its ranks run it: real processes on loopback addresses, over gloo (the
layout and the judgement, pure: test_multinode.py; live: each test starts the ranks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from preflight import multinode
from preflight.collective import CollectiveSettings
from tests.ports import free_port

PREFLIGHT = Path(sys.executable).parent / "preflight"

pytestmark = pytest.mark.live  # each test starts preflight's ranks as processes


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


@pytest.mark.parametrize("world", [2, 4])
def test_allreduce_across_real_processes(world: int) -> None:
    port = free_port()
    procs = []
    for rank in range(world):
        env = {
            **os.environ,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
        }
        args = [
            str(PREFLIGHT),
            "run",
            "--check",
            "allreduce",
            "--sizes",
            "65536,4194304",
            "--min-busbw-gbps",
            "1e-6",
            "--json",
        ]
        procs.append(subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        reports.append(json.loads(out))
    checks = [r["checks"][0] for r in reports]
    assert {c["status"] for c in checks} == {"pass"}
    assert checks[0]["summary"].startswith(f"{world} ranks over gloo: busbw ")
    header, *rows = checks[0]["evidence"]
    assert header.split() == ["size(B)", "count", "type", "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)"]
    sizes = [int(row.split()[0]) for row in rows]
    assert sizes == [65536, 4194304]
    for row in rows:
        size, _, _, _, time_us, algbw, busbw = row.split()
        assert float(time_us) > 0
        assert float(algbw) == pytest.approx(
            int(size) / (float(time_us) / 1e6) / 1e9, rel=0.02, abs=0.002
        )  # both printed to 3 decimals
        assert float(busbw) == pytest.approx(
            float(algbw) * 2 * (world - 1) / world, rel=0.02, abs=0.002
        )  # both printed to 3 decimals
