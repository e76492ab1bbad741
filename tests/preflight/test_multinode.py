"""The all-reduce with peers: the plan and the judgement (pure, injected numbers); real gloo processes are
test_multinode_runs.py's."""

from __future__ import annotations

import pytest

from preflight import multinode
from preflight.collective import CollectiveSettings, Measurement


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
