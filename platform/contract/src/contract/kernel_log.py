"""Find GPU and host hardware errors in a kernel log (dmesg or the journal).

One reading of a kernel line for every component: preflight's kernel-log check
and Warden's node agent both parse with it, so a line that fails a job's
preflight is the line Warden reports on the Node (and neither depends on the other).

Recognized, in the three timestamp styles seen in practice (`dmesg`'s
seconds since boot, `dmesg -T`, and journal/syslog wall-clock lines):

- NVIDIA Xid: `NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.`
- NVSwitch SXid: `nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, ...`
- other NVRM errors, including "GPU has fallen off the bus" without an Xid
- machine checks (`mce: [Hardware Error]`), EDAC memory errors (corrected and
  uncorrected), PCIe AER errors (corrected and uncorrected)

Everything else (noise, truncated lines, other drivers) is ignored.

The parser is total and linear on hostile logs: lines split on newlines only
(a U+2028 printed into the log stays inside its line), every pattern is either
anchored or a literal prefix followed by bounded work, and a timestamp that
names no real moment (Feb 29 of a common year, hour 99) leaves the event
without a time ("unparseable timestamp") instead of failing the whole check.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from contract.signals import action_of, bucket_of

_PCI = r"(?:PCI:)?(?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)"
# A code is at most 6 ASCII digits (real ones have 2-3): a longer run is no Xid line, and int() never sees
# thousands of digits (past its limit it raises ValueError).
_CODE = r"(?P<code>[0-9]{1,6})(?![0-9])"
_XID = re.compile(rf"NVRM: Xid \({_PCI}\): {_CODE}(?:, (?P<detail>.*))?")
_SXID = re.compile(rf"SXid \({_PCI}\): {_CODE}(?:, (?P<detail>.*))?")
# Prefix + bounded pattern; what may follow anywhere later in the line is found with `in`
# or one forward search from there (a `.*` between two patterns is quadratic under search).
_OFF_BUS_AT = re.compile(rf"NVRM: GPU (?:at )?{_PCI}")
_FAILURE_WORD = re.compile(r"\b(?:error|failed|failure)\b", re.IGNORECASE)
_MCE = re.compile(r"mce: \[Hardware Error\]")
_EDAC_KIND = re.compile(r"\b(?P<kind>UE|CE)\b")
_AER = re.compile(rf"(?:pcieport|nvidia) {_PCI}: AER: (?P<kind>Corrected|Uncorrected)")

# A journal or syslog line from anything but the kernel: never a kernel event, even if it quotes one.
_OTHER_PROCESS = re.compile(
    r"^(?:\w{3} +\d+ \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT\S+) \S+ (?!kernel:)[\w.@/-]+(?:\[\d+\])?: "
)

# How serious each kind of event is for a job about to start.
FATAL, WARN, INFO = "fatal", "warn", "info"


UNPARSEABLE = "unparseable timestamp"
_LATEST = 1e10  # seconds: year 2286 on the wall clock, three centuries of uptime on the boot clock


@dataclass(frozen=True, kw_only=True)
class Event:
    kind: str  # xid, sxid, off_bus, nvrm, mce, edac_ue, edac_ce, aer_uncorrected, aer_corrected
    severity: str
    line: str
    time: float | None  # seconds: since boot (dmesg) or since the epoch (wall clock)
    clock: str  # "boot", "wall" or "none"
    pci: str | None = None
    code: int | None = None
    bucket: str | None = None
    action: str | None = None
    problem: str | None = None  # UNPARSEABLE when the line's timestamp names no real moment


@dataclass(frozen=True, kw_only=True)
class Scan:
    events: list[Event]
    newest_boot: float | None  # the newest boot-clock time of any line: "now" for a saved dmesg


def lines(text: str) -> list[str]:
    """The log's lines: split on newlines only (str.splitlines also splits on U+2028, U+0085, form feeds...)."""
    parts = text.split("\n")
    if parts[-1] == "":
        parts.pop()  # the newline that ends the last line
    return [line.removesuffix("\r") for line in parts]


def _seconds(style: str, stamp: str, year: int) -> float:
    if style == "boot":
        return float(stamp)
    if style == "ctime":
        return datetime.strptime(stamp, "%a %b %d %H:%M:%S %Y").timestamp()
    if style == "iso":
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    return datetime.strptime(f"{year} {stamp}", "%Y %b %d %H:%M:%S").timestamp()


# The timestamps a kernel log line may start with, tried in this order; `t` holds the time.
_STYLES = (
    ("boot", re.compile(r"^\[\s*(?P<t>\d+\.\d+)\]\s")),  # dmesg: seconds since boot
    ("ctime", re.compile(r"^\[(?P<t>\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]\s")),  # dmesg -T
    ("iso", re.compile(r"^(?P<t>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:?\d\d|Z)?) \S+ kernel: ")),
    ("syslog", re.compile(r"^(?P<t>\w{3} +\d+ \d\d:\d\d:\d\d) \S+ kernel: ")),  # no year: the caller's
)


def _timestamp(line: str, year: int) -> tuple[float | None, str, str, str | None]:
    """(seconds, clock, message, problem) for one line."""
    for style, pattern in _STYLES:
        if m := pattern.match(line):
            clock = "boot" if style == "boot" else "wall"
            try:
                seconds = _seconds(style, m["t"], year)
            except (ValueError, OverflowError, OSError):
                return None, "none", line[m.end() :], UNPARSEABLE
            if not 0 <= seconds < _LATEST:  # NaN, infinities, before 1970, or an uptime of centuries
                return None, "none", line[m.end() :], UNPARSEABLE
            return seconds, clock, line[m.end() :], None
    return None, "none", line, None


def _classify(message: str) -> dict[str, Any] | None:
    if m := _XID.search(message):
        code = int(m["code"])
        action = action_of(code)
        severity = INFO if action == "none" else WARN if action == "restart_pods" else FATAL
        return {
            "kind": "xid",
            "pci": m["pci"],
            "code": code,
            "bucket": bucket_of(code),
            "action": action,
            "severity": severity,
        }
    if m := _SXID.search(message):
        fatal = "non-fatal" not in (m["detail"] or "").lower()
        return {
            "kind": "sxid",
            "pci": m["pci"],
            "code": int(m["code"]),
            "severity": FATAL if fatal else WARN,
            "action": "review",
        }
    if (m := _OFF_BUS_AT.search(message)) and "fallen off the bus" in message[m.end() :].lower():
        return {"kind": "off_bus", "pci": m["pci"], "severity": FATAL, "action": "replace"}
    if _MCE.search(message):
        return {"kind": "mce", "severity": FATAL, "action": "review"}
    if (at := message.find("EDAC ")) >= 0 and (m := _EDAC_KIND.search(message, at)):
        uncorrected = m["kind"] == "UE"
        return {
            "kind": "edac_ue" if uncorrected else "edac_ce",
            "severity": FATAL if uncorrected else INFO,
            "action": "review" if uncorrected else "none",
        }
    if m := _AER.search(message):
        uncorrected = m["kind"] == "Uncorrected"
        return {
            "kind": "aer_uncorrected" if uncorrected else "aer_corrected",
            "pci": m["pci"],
            "severity": FATAL if uncorrected else INFO,
            "action": "review" if uncorrected else "none",
        }
    if (at := message.find("NVRM: ")) >= 0 and _FAILURE_WORD.search(message, at):
        return {"kind": "nvrm", "severity": WARN, "action": "review"}
    return None


def scan(log: Iterable[str], year: int | None = None) -> Scan:
    year = year or datetime.now().year
    events = []
    newest: float | None = None
    for raw in log:
        line = raw.rstrip("\n")
        if _OTHER_PROCESS.match(line):
            continue
        when, clock, message, problem = _timestamp(line, year)
        if clock == "boot" and when is not None:
            newest = when if newest is None else max(newest, when)
        found = _classify(message)
        if found is not None:
            events.append(Event(line=line, time=when, clock=clock, problem=problem, **found))
    return Scan(events=events, newest_boot=newest)


def parse(log: Iterable[str], year: int | None = None) -> list[Event]:
    return scan(log, year).events


def recent(
    events: list[Event],
    window_s: float,
    now: float | None = None,
    uptime: float | None = None,
    newest_line: float | None = None,
) -> list[Event]:
    """Events inside the look-back window: older ones were handled when they happened.

    Boot-clock events are measured against `uptime` (the live machine's), else
    the newest line of a saved log (`newest_line`, from `scan`), else the newest
    event; wall-clock ones against `now`. Events without a time are always kept:
    they cannot be shown to be old.
    """
    newest_event = max((e.time for e in events if e.clock == "boot" and e.time is not None), default=0.0)
    reference = {
        "boot": uptime if uptime is not None else newest_line if newest_line is not None else newest_event,
        "wall": now if now is not None else datetime.now().timestamp(),
    }
    return [e for e in events if e.time is None or e.clock == "none" or reference[e.clock] - e.time <= window_s]
