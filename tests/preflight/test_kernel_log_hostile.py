"""The kernel-log parser is total and linear: hostile or damaged logs end in a verdict, never a crash or a hang."""

from __future__ import annotations

import time

import pytest

from contract import kernel_log
from preflight.checks import check_kernel_log

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."


@pytest.mark.parametrize(
    "line",
    [
        f"[Sun Feb 29 10:00:00 2026] {XID}",  # 2026 is not a leap year
        f"[Sun Nov 29 99:00:00 2026] {XID}",  # hour 99
        f"2026-13-01T10:00:00Z host kernel: {XID}",  # month 13
        f"2026-02-30T10:00:00+00:00 host kernel: {XID}",
        f"Feb 30 10:00:00 host kernel: {XID}",
        f"[99999999999999999999999.000000] {XID}",  # overflows any clock
    ],
)
def test_an_impossible_timestamp_is_unparseable_not_a_crash(line: str) -> None:
    (event,) = kernel_log.parse([line], year=2026)
    assert (event.kind, event.code, event.time, event.problem) == ("xid", 79, None, "unparseable timestamp")
    assert check_kernel_log(line + "\n", window_s=600).status == "fail"  # the fault still counts


@pytest.mark.parametrize(
    "filler",
    [
        "NVRM: " * 200_000,  # many starts for `NVRM: .*error`
        "EDAC " + "1" * 1_000_000,  # a digit run before UE|CE
        "NVRM: GPU at PCI:0000:3b:00 " + "x" * 1_000_000,  # `.*fallen off the bus` without the words
        "mce: " * 200_000,
    ],
)
def test_a_megabyte_line_is_parsed_in_linear_time(filler: str) -> None:
    line = f"[  100.000000] {filler}"
    started = time.process_time()
    kernel_log.parse([line])
    elapsed = time.process_time() - started
    # Not a timing assertion on speed: a quadratic scan of 1 MB takes minutes, a linear one milliseconds.
    assert elapsed < 5, f"{elapsed:.1f} s CPU for one 1 MB line"


def test_unicode_line_separators_do_not_split_a_line() -> None:
    # U+2028 inside a message (a process can print anything into the kernel log) must not make a second line.
    text = f"[  10.000000] usb 1-1: product string \u2028{XID}\n[  20.000000] eth0: link up\n"
    assert kernel_log.lines(text) == [
        f"[  10.000000] usb 1-1: product string \u2028{XID}",
        "[  20.000000] eth0: link up",
    ]
    result = check_kernel_log(text, window_s=600)
    assert len(result.evidence) == 1  # one line, whatever it contains
    assert "\u2028" in result.evidence[0]


def test_the_look_back_window_is_measured_from_the_newest_line() -> None:
    # An Xid at 100 s, then an hour of quiet log: in a saved log without uptime, the Xid is old.
    text = f"[  100.000000] {XID}\n[ 3700.000000] eth0: link up\n"
    assert check_kernel_log(text, window_s=600).status == "pass"
    assert check_kernel_log(text, window_s=7200).status == "fail"


@pytest.mark.parametrize(
    "message",
    [
        "NVRM: Xid (PCI:0000:3b:00): " + "7" * 5000 + ", pid=1, name=x",  # past int()'s digit limit
        "NVRM: SXid (PCI:0000:3b:00): " + "9" * 5000 + ", Non-fatal",
        "NVRM: Xid (PCI:0000:3b:00): " + "1" * 50,  # within the limit, but no Xid code is that long
    ],
)
def test_a_code_of_thousands_of_digits_is_skipped_not_a_traceback(message: str) -> None:
    line = f"[  100.000000] {message}"
    assert [e.kind for e in kernel_log.parse([line])] == []  # not an event: no Xid code has that many digits
    assert check_kernel_log(line + "\n", window_s=600).status == "pass"


@pytest.mark.parametrize("number", ["9" * 5000, "1e" + "9" * 3000, "-" + "9" * 4000])
def test_a_report_with_a_number_of_thousands_of_digits_is_refused_in_one_line(number: str) -> None:
    from contract import health
    from contract.problem import Invalid
    from preflight import deep

    text = f'{{"schema": "{health.REPORT_SCHEMA}", "check": "gpu_count", "summary": "s", "gpu": {number}, "time": 1}}'
    for read in (lambda: health.load_report(text, "termination message"), lambda: deep.read(text)):
        with pytest.raises(Invalid) as refused:
            read()
        assert len(refused.value.lines) == 1
