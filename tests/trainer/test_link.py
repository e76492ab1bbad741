"""The link emulator: the model's arithmetic, its settings, and a run whose all-reduces it holds back."""

from __future__ import annotations

import time

import pytest
import torch
from trainer.config import ConfigError, compose
from trainer.distributed.counted_pg import LinkWork
from trainer.distributed.link import Link, allreduce_s, inner_step_s, latency_s, transfer_s, wire_bytes

from tests.trainer.conftest import CONFIG


def test_a_ring_all_reduce_sends_2_n_minus_1_over_n_of_the_payload() -> None:
    assert wire_bytes(1000, 1) == 0  # one group: nothing crosses the link
    assert wire_bytes(1000, 2) == 1000
    assert wire_bytes(900, 3) == 1200
    assert latency_s(30, 2) == pytest.approx(0.030)
    assert latency_s(30, 3) == pytest.approx(0.060)  # 4 sequential one-way trips of RTT/2
    assert transfer_s(10**9, 8) == pytest.approx(1.0)  # 1 GB over 8 Gbit/s
    assert transfer_s(10**9, 0) == 0  # 0: unlimited
    # 8b's fp32 pseudo-gradient (32 GB) between two regions at 100 Gbit/s and 30 ms.
    assert allreduce_s(32 * 10**9, 2, 30, 100) == pytest.approx(0.030 + 2.56)
    assert allreduce_s(32 * 10**9, 1, 30, 100) == 0


def test_all_reduces_issued_together_share_the_bandwidth_and_overlap_their_latency() -> None:
    link = Link(rtt_ms=10, gbps=8)  # 1 MB takes 1 ms
    done = [link.schedule(0.0, 10**6, 2) for _ in range(3)]
    assert done == pytest.approx([0.011, 0.012, 0.013])
    assert link.busy_s == pytest.approx(0.013)  # not 3 x 11 ms
    assert link.schedule(1.0, 10**6, 2) == pytest.approx(1.011)  # idle link: starts at once
    assert link.busy_s == pytest.approx(0.024)
    assert link.wire == 4 * 10**6
    assert not Link(0, 0).enabled
    assert Link(0, 1).enabled
    assert Link(5, 0).enabled


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["ft.link_rtt_ms=-1"], "ft.link_rtt_ms: must be at least 0 (got -1.0)"),
        (["ft.link_gbps=nan"], "ft.link_gbps: nan is not a finite number"),
        (["ft.link_gbps=inf"], "ft.link_gbps: inf is not a finite number"),
        (["ft.link_gbps=fast"], "ft.link_gbps: 'fast' is not a number"),
        (["ft.link_rtt_ms=30", "ft.enabled=false", "ft.replica_groups=1"], "set ft.enabled=true"),
    ],
)
def test_bad_link_settings_are_one_line(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        compose(CONFIG, ["run.name=x", *overrides])
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_off_by_default() -> None:
    cfg = compose(CONFIG, ["run.name=x"])
    assert (cfg.ft.link_rtt_ms, cfg.ft.link_gbps) == (0, 0)


def test_the_throughput_model_counts_only_the_communication_compute_does_not_hide() -> None:
    # 1 MB over 8 Gbit/s (1 ms) and 10 ms RTT between 2 groups: 11 ms per sync.
    assert inner_step_s(0.1, 1, 10**6, 2, 10, 8) == pytest.approx(0.111)  # DDP: every step
    assert inner_step_s(0.1, 10, 10**6, 2, 10, 8) == pytest.approx(0.1011)  # DiLoCo: once per 10
    assert inner_step_s(0.005, 10, 10**6, 2, 10, 8, overlap_steps=1) == pytest.approx(0.0056)  # 6 ms exposed
    assert inner_step_s(0.1, 10, 10**6, 2, 10, 8, overlap_steps=1) == pytest.approx(0.1)  # hidden
    assert inner_step_s(0.1, 1, 10**6, 1, 10, 8) == pytest.approx(0.1)  # one group: no link


class _Done:
    """A collective's work that has already completed with ``value`` (or failed with ``error``)."""

    def __init__(self, value: object = None, error: Exception | None = None) -> None:
        self.future: torch.futures.Future[object] = torch.futures.Future()
        if error is None:
            self.future.set_result(value)
        else:
            self.future.set_exception(error)

    def wait(self, timeout: object = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def get_future(self) -> torch.futures.Future[object]:
        return self.future


def test_a_held_work_completes_at_its_deadline_through_wait_and_through_its_future() -> None:
    deadline = time.monotonic() + 0.05
    work = LinkWork(_Done("sum"), deadline)
    assert not work.is_completed()
    assert work.get_future().wait() == "sum"
    assert time.monotonic() >= deadline  # the future was held back until then
    later = LinkWork(_Done(), time.monotonic() + 0.05)
    assert later.wait()
    assert later.is_completed()
    failed = LinkWork(_Done(error=RuntimeError("peer gone")), time.monotonic() + 60)
    with pytest.raises(RuntimeError, match="peer gone"):
        failed.get_future().wait()  # a failure is not held back
