"""A driver run whose all-reduces the link emulator holds back (the emulator's arithmetic: test_link.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from trainer.distributed.link import allreduce_s, latency_s, transfer_s, wire_bytes

from tests.trainer.conftest import events, final, run

pytestmark = pytest.mark.live  # the driver, with the link emulator on


def test_an_emulated_link_holds_each_ddp_step_back_by_rtt_plus_bytes_over_bandwidth(tmp_path: Path) -> None:
    # 2 groups, DDP: one gradient bucket per step, each all-reduce alone on the link, so the emulator's
    # busy time is exactly steps x (RTT + wire bytes / bandwidth); the window's wall time contains it.
    rtt_ms, gbps, steps = 50.0, 0.1, 20
    run(
        tmp_path, "link", f"run.steps={steps}", "ft.min_replicas=2", "checkpoint.every=100000",
        f"ft.link_rtt_ms={rtt_ms}", f"ft.link_gbps={gbps}",
    )  # fmt: skip
    for group in (0, 1):
        report = final(tmp_path, "link", group)
        sent, wire = report["bytes_sent"], report["link_wire_bytes"]
        assert wire == wire_bytes(sent, 2) == sent
        # busy = calls x RTT + all wire bytes / bandwidth, one call per attempted step (a retry adds one).
        calls = (report["link_busy_s"] - transfer_s(wire, gbps)) / latency_s(rtt_ms, 2)
        assert calls == pytest.approx(round(calls), abs=1e-3)
        assert round(calls) >= steps
        per_call = allreduce_s(sent // round(calls), 2, rtt_ms, gbps)
        assert per_call > 0.05 + 0.04  # 547,840 bytes at 0.1 Gbit/s: 44 ms on top of the RTT
        commits = [e["time"] for e in events(tmp_path, "link", group) if e["event"] == "commit"]
        # What the emulator booked shows in the measured step time (it sleeps at least that long).
        assert commits[-1] - commits[0] >= (len(commits) - 1) * per_call
        assert not math.isnan(report["loss"])
