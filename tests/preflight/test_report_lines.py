"""The terminal report shows why a check failed, not only that it did."""

from __future__ import annotations

from preflight.report import EVIDENCE_LINES, Result, lines


def test_failing_evidence_is_printed_without_json() -> None:
    rows = [f"gpu {i}: xid 79" for i in range(3)]
    text = lines(
        [Result("gpu-state", "fail", "3 GPUs fell off the bus", rows), Result("shm", "pass", "ok", ["64 GiB"])]
    )
    assert text.splitlines() == [
        "FAIL  gpu-state: 3 GPUs fell off the bus",
        "      gpu 0: xid 79",
        "      gpu 1: xid 79",
        "      gpu 2: xid 79",
        "PASS  shm: ok",
    ]


def test_long_evidence_says_how_many_more_and_where() -> None:
    rows = [f"line {i}" for i in range(EVIDENCE_LINES + 7)]
    text = lines([Result("kernel-log", "error", "could not read dmesg", rows)]).splitlines()
    assert text[1 : EVIDENCE_LINES + 1] == [f"      line {i}" for i in range(EVIDENCE_LINES)]
    assert text[-1] == "      ... 7 more evidence lines; --json prints all of them"
