"""The node agent: Xid and SXid events from the kernel log, reported as Node conditions.

Runs on every GPU node (DaemonSet). It reads the kernel ring buffer
(/dev/kmsg), parses it with contract.kernel_log (the parser preflight's
kernel-log check uses too) and sets two conditions on its Node
(names.XID_CONDITION, names.SXID_CONDITION), True while the current boot has logged such
events, with "<code>@<epoch seconds>" for the latest event of each code.
The ring buffer starts empty at boot, so a reboot clears the conditions and a
restarted agent reports exactly what it reported before.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from datetime import UTC, datetime
from typing import Any

from contract import kernel_log, names
from contract.kernel_log import Event, parse
from warden.kube import Kube

log = logging.getLogger("warden.agent")
HEARTBEAT_S = 300.0


def read_kmsg(path: str = "/dev/kmsg") -> list[str]:
    """Every record in the kernel ring buffer, as dmesg prints them: "[seconds] message"."""
    lines = []
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                record = os.read(fd, 8192).decode(errors="replace")
            except BlockingIOError:
                break  # read everything there is
            except OSError as error:
                if error.errno == errno.EPIPE:
                    continue  # the buffer wrapped under us: the next read resumes at the oldest record
                raise
            if not record:
                break  # a regular file (tests) ends
            for line in kernel_log.lines(record):  # newlines only: a U+2028 in a message stays in its line
                head, sep, message = line.partition(";")
                fields = head.split(",")
                if sep and len(fields) >= 3 and _microseconds(fields[2]):
                    lines.append(f"[{int(fields[2]) / 1e6:12.6f}] {message}")
    finally:
        os.close(fd)
    return lines


def _microseconds(field: str) -> bool:
    """A record's time: ASCII digits ("²".isdigit() is True), at most 20 (past 4300, int() raises ValueError)."""
    return field.isascii() and field.isdigit() and len(field) <= 20


def boot_epoch(proc_uptime: str = "/proc/uptime") -> float:
    with open(proc_uptime) as f:
        return time.time() - float(f.read().split()[0])


def _rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def latest_codes(events: list[Event], kinds: tuple[str, ...], booted_at: float) -> dict[int, float]:
    latest: dict[int, float] = {}
    for event in events:
        if event.kind not in kinds:
            continue
        code = 79 if event.kind == "off_bus" else event.code  # "fallen off the bus" is Xid 79 without the line
        if code is None:
            continue
        when = booted_at + event.time if event.clock == "boot" and event.time is not None else (event.time or 0.0)
        latest[code] = max(latest.get(code, 0.0), when)
    return latest


def conditions(events: list[Event], booted_at: float) -> dict[str, tuple[str, str, str]]:
    """Condition type -> (status, reason, message) for what the current boot logged."""
    found = {}
    for kind, (kinds, what) in {
        names.XID_CONDITION: (("xid", "off_bus"), "Xid"),
        names.SXID_CONDITION: (("sxid",), "SXid"),
    }.items():
        codes = latest_codes(events, kinds, booted_at)
        message = " ".join(f"{code}@{int(when)}" for code, when in sorted(codes.items()))
        found[kind] = ("True", f"{what}Logged", message) if codes else ("False", f"No{what}", f"no {what} since boot")
    return found


class Agent:
    def __init__(self, kube: Kube, node: str, kmsg: str = "/dev/kmsg", uptime: str = "/proc/uptime") -> None:
        self.kube, self.node, self.kmsg, self.uptime = kube, node, kmsg, uptime
        self.sent: dict[str, tuple[str, str, str]] = {}
        self.transitions: dict[str, str] = {}
        self.sent_at = 0.0

    def load(self) -> None:
        """What the Node says now, so a restarted agent keeps transition times."""
        node = self.kube.get(f"/api/v1/nodes/{self.node}") or {}
        for c in (node.get("status") or {}).get("conditions") or []:
            if c.get("type") in (names.XID_CONDITION, names.SXID_CONDITION):
                self.sent[c["type"]] = (c.get("status", ""), c.get("reason", ""), c.get("message", ""))
                self.transitions[c["type"]] = c.get("lastTransitionTime", "")

    def step(self, now: float) -> bool:
        """Report if anything changed or the heartbeat is due; True when it patched."""
        found = conditions(parse(read_kmsg(self.kmsg)), boot_epoch(self.uptime))
        if found == self.sent and now - self.sent_at < HEARTBEAT_S:
            return False
        items: list[dict[str, Any]] = []
        for kind, (status, reason, message) in found.items():
            if self.sent.get(kind, ("",))[0] != status or not self.transitions.get(kind):
                self.transitions[kind] = _rfc3339(now)
            items.append(
                {
                    "type": kind,
                    "status": status,
                    "reason": reason,
                    "message": message,
                    "lastHeartbeatTime": _rfc3339(now),
                    "lastTransitionTime": self.transitions[kind],
                }
            )
        self.kube.patch_node_status(self.node, {"status": {"conditions": items}})
        self.sent, self.sent_at = found, now
        return True

    def run(self, stop: threading.Event, interval_s: float = 30) -> None:
        self.load()
        while not stop.is_set():
            try:
                self.step(time.time())
            except Exception as error:  # keep reporting; the next scan retries
                log.warning("agent: %s", error)
            stop.wait(interval_s)
