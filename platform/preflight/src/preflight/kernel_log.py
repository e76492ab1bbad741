"""Find GPU and host hardware errors in a kernel log (dmesg or the journal).

Recognized, in the three timestamp styles seen in practice (`dmesg`'s
seconds since boot, `dmesg -T`, and journal/syslog wall-clock lines):

- NVIDIA Xid: `NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.`
- NVSwitch SXid: `nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, ...`
- other NVRM errors, including "GPU has fallen off the bus" without an Xid
- machine checks (`mce: [Hardware Error]`), EDAC memory errors (corrected and
  uncorrected), PCIe AER errors (corrected and uncorrected)

Everything else (noise, truncated lines, other drivers) is ignored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from preflight.xid import action_of, bucket_of

_PCI = r"(?:PCI:)?(?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)"
_XID = re.compile(rf"NVRM: Xid \({_PCI}\): (?P<code>\d+)(?:, (?P<detail>.*))?")
_SXID = re.compile(rf"SXid \({_PCI}\): (?P<code>\d+)(?:, (?P<detail>.*))?")
_OFF_BUS = re.compile(rf"NVRM: GPU (?:at )?{_PCI}.*fallen off the bus", re.IGNORECASE)
_NVRM_ERROR = re.compile(r"NVRM: .*\b(?:error|failed|failure)\b", re.IGNORECASE)
_MCE = re.compile(r"mce: \[Hardware Error\]")
_EDAC = re.compile(r"EDAC .*?\b(?P<count>\d+)? ?(?P<kind>UE|CE)\b")
_AER = re.compile(rf"(?:pcieport|nvidia) {_PCI}: AER: (?P<kind>Corrected|Uncorrected)")

_UPTIME = re.compile(r"^\[\s*(?P<s>\d+\.\d+)\]\s")
_CTIME = re.compile(r"^\[(?P<t>\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]\s")
_SYSLOG = re.compile(r"^(?P<t>\w{3} +\d+ \d\d:\d\d:\d\d) \S+ kernel: ")
# A journal or syslog line from anything but the kernel: never a kernel event, even if it quotes one.
_OTHER_PROCESS = re.compile(
    r"^(?:\w{3} +\d+ \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT\S+) \S+ (?!kernel:)[\w.@/-]+(?:\[\d+\])?: "
)
_ISO = re.compile(r"^(?P<t>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:?\d\d|Z)?) \S+ kernel: ")

# How serious each kind of event is for a job about to start.
FATAL, WARN, INFO = "fatal", "warn", "info"


@dataclass(frozen=True)
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


def _timestamp(line: str, year: int) -> tuple[float | None, str, str]:
    """(seconds, clock, message) for one line."""
    if m := _UPTIME.match(line):
        return float(m["s"]), "boot", line[m.end() :]
    if m := _CTIME.match(line):
        return datetime.strptime(m["t"], "%a %b %d %H:%M:%S %Y").timestamp(), "wall", line[m.end() :]
    if m := _ISO.match(line):
        return datetime.fromisoformat(m["t"].replace("Z", "+00:00")).timestamp(), "wall", line[m.end() :]
    if m := _SYSLOG.match(line):
        return datetime.strptime(f"{year} {m['t']}", "%Y %b %d %H:%M:%S").timestamp(), "wall", line[m.end() :]
    return None, "none", line


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
    if m := _OFF_BUS.search(message):
        return {"kind": "off_bus", "pci": m["pci"], "severity": FATAL, "action": "replace"}
    if _MCE.search(message):
        return {"kind": "mce", "severity": FATAL, "action": "review"}
    if m := _EDAC.search(message):
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
    if _NVRM_ERROR.search(message):
        return {"kind": "nvrm", "severity": WARN, "action": "review"}
    return None


def parse(lines: Iterable[str], year: int | None = None) -> list[Event]:
    year = year or datetime.now().year
    events = []
    for raw in lines:
        line = raw.rstrip("\n")
        if _OTHER_PROCESS.match(line):
            continue
        when, clock, message = _timestamp(line, year)
        found = _classify(message)
        if found is not None:
            events.append(Event(line=line, time=when, clock=clock, **found))
    return events


def recent(events: list[Event], window_s: float, now: float | None = None, uptime: float | None = None) -> list[Event]:
    """Events inside the look-back window: older ones were handled when they happened.

    Boot-clock events are measured against `uptime` (the live machine's, or the
    newest timestamp in a saved log); wall-clock ones against `now`. Events
    without a time are always kept: they cannot be shown to be old.
    """
    newest_boot = max((e.time for e in events if e.clock == "boot" and e.time is not None), default=0.0)
    reference = {
        "boot": uptime if uptime is not None else newest_boot,
        "wall": now if now is not None else datetime.now().timestamp(),
    }
    return [e for e in events if e.time is None or e.clock == "none" or reference[e.clock] - e.time <= window_s]
