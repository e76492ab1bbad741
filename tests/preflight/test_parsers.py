"""Kernel log and nvidia-smi parsing against fixtures in the real formats (noise and truncation included)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from contract import kernel_log
from contract.signals import action_of, bucket_of
from preflight import nvidia_smi
from preflight.checks import check_gpu_state, check_kernel_log

FIXTURES = Path(__file__).parent / "fixtures"


def test_dmesg_events_are_found_and_classified() -> None:
    events = kernel_log.parse((FIXTURES / "dmesg.txt").read_text().splitlines())
    found = [(e.kind, e.code, e.pci, e.bucket, e.action, e.severity) for e in events]
    assert found == [
        ("xid", 13, "0000:3b:00", "restart_application", "restart_pods", "warn"),
        ("xid", 43, "0000:8f:00", "informational", "none", "info"),
        ("mce", None, None, None, "review", "fatal"),
        ("edac_ce", None, None, None, "none", "info"),
        ("xid", 48, "0000:3b:00", "needs_analysis", "review", "fatal"),
        ("xid", 79, "0000:3b:00", "restart_machine", "replace", "fatal"),
        ("off_bus", None, "0000:3b:00.0", None, "replace", "fatal"),
        ("sxid", 12028, "0000:07:00.0", None, "review", "warn"),
        ("aer_uncorrected", None, "0000:3a:01.0", None, "review", "fatal"),
    ]
    assert all(e.clock == "boot" for e in events)
    assert events[0].time == 1500.1


def test_look_back_window_drops_old_events() -> None:
    events = kernel_log.parse((FIXTURES / "dmesg.txt").read_text().splitlines())
    # The newest line is at 9001 s; a 10-minute window keeps only the burst at 9000 s.
    recent = kernel_log.recent(events, window_s=600)
    assert {e.time for e in recent} == {9000.0015, 9000.001, 9000.0021, 9000.3, 9000.4}
    assert kernel_log.recent(events, window_s=600, uptime=20000) == []


def test_journal_lines_only_count_when_the_kernel_wrote_them() -> None:
    events = kernel_log.parse((FIXTURES / "journal.txt").read_text().splitlines(), year=2026)
    assert [(e.kind, e.code) for e in events] == [("xid", 94), ("aer_corrected", None), ("edac_ue", None)]
    assert all(e.clock == "wall" for e in events)
    now = datetime(2026, 11, 29, 10, 5, 0).timestamp()
    assert [e.kind for e in kernel_log.recent(events, window_s=300, now=now)] == ["aer_corrected", "edac_ue"]


def test_other_timestamp_styles() -> None:
    lines = [
        "[Sun Nov 29 10:00:00 2026] NVRM: Xid (PCI:0000:04:00): 95, pid=1, Uncontained: FBHUB. RST: Yes, D-RST: No",
        "2026-11-29T10:00:01.123456+00:00 host kernel: NVRM: Xid (PCI:0000:05:00): 151, pid=2, Key:...",
        "NVRM: Xid (PCI:0000:06:00): 999, unknown code without a timestamp",
    ]
    events = kernel_log.parse(lines)
    assert [(e.code, e.clock, e.action) for e in events] == [
        (95, "wall", "reboot"),
        (151, "wall", "reboot"),
        (999, "none", "review"),
    ]
    assert kernel_log.recent(events, window_s=1, now=datetime(2030, 1, 1).timestamp())[-1].code == 999  # no time: kept


def test_xid_buckets() -> None:
    assert (bucket_of(79), action_of(79)) == ("restart_machine", "replace")
    assert (bucket_of(146), action_of(146)) == ("needs_analysis", "review")
    assert (bucket_of(12345), action_of(12345)) == (None, "review")


def test_kernel_log_check_fails_on_hardware_errors_only() -> None:
    text = (FIXTURES / "dmesg.txt").read_text()
    failed = check_kernel_log(text, window_s=600)
    assert failed.status == "fail"
    assert failed.summary == "4 hardware error(s) in the last 600 s: aer_uncorrected, off_bus, xid 48, xid 79"
    assert len(failed.evidence) == 5  # the four fatal lines, then the SXid warning
    early = "\n".join(text.splitlines()[:7])  # up to the Xid 13 and 43: application-level only
    assert check_kernel_log(early, window_s=10_000).status == "pass"


def test_nvidia_smi_healthy_and_faulty() -> None:
    healthy = nvidia_smi.parse((FIXTURES / "nvidia-smi-healthy.csv").read_text())
    assert len(healthy) == 8
    assert [g.problems() for g in healthy] == [[]] * 8  # idle, app clocks and SW power cap are normal
    assert (
        check_gpu_state((FIXTURES / "nvidia-smi-healthy.csv").read_text(), 8).summary
        == "8 GPUs healthy, driver 570.124.06, CUDA 12.8"
    )
    result = check_gpu_state((FIXTURES / "nvidia-smi-faulty.csv").read_text(), 8)
    assert result.status == "fail"
    assert result.evidence == [
        "7 GPUs visible, the pool's machine has 8",
        "GPU 1 (00000000:05:00.0): 2 uncorrectable ECC errors",
        "GPU 1 (00000000:05:00.0): row remapping pending (needs a reset)",
        "GPU 2 (00000000:0A:00.0): row remapping failed (replace the GPU)",
        "GPU 3 (00000000:0B:00.0): throttled: hardware slowdown",
        "GPU 3 (00000000:0B:00.0): throttled: hardware thermal slowdown",
    ]


def test_driver_floor() -> None:
    text = (FIXTURES / "nvidia-smi-healthy.csv").read_text()
    assert check_gpu_state(text, 8, min_driver="570.86.15").status == "pass"
    old = check_gpu_state(text, 8, min_driver="575.51.3")
    assert (old.status, old.summary) == ("fail", "driver 570.124.06 is older than 575.51.3")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("0, 00000000:04:00.0, NVIDIA H200, 570.124.06, 0, [N/A], No\n", "row has 7 fields, expected 9"),
        ("index, name\n0, NVIDIA H200\n", "nvidia-smi output lacks pci.bus_id"),
        ("zero, 00000000:04:00.0, NVIDIA H200, 570.124.06, 0, [N/A], No, No, 0x0\n", "row for GPU 'zero' is malformed"),
    ],
)
def test_malformed_nvidia_smi_is_an_error_not_a_pass(text: str, words: str) -> None:
    result = check_gpu_state(text, 8)
    assert result.status == "error"
    assert words in result.summary
