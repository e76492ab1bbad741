"""Every Node, kept current by a watch and made whole again by a periodic relist (resync).

A watch can miss nothing it was sent, but it can end, fall behind (HTTP 410
Gone) or be cut; relisting every `resync_s` repairs any drift. Warden also
stores the objects its own patches return, so a round never acts on a record
older than what it just wrote.

A watch event that changes what can carry a signal (observe.signal_key: the
agent's conditions, Ready, preflight's annotation, GPUs, GKE's maintenance
label) calls `on_signal(name)`, so the service reacts in seconds rather than
at its next round. An event that is not shaped like one is skipped and
counted, never allowed to end the watch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from warden.kube import ApiError, Kube
from warden.observe import signal_key

log = logging.getLogger(__package__)


def watch_with_backoff(
    what: str, sync_once: Callable[[], None], reset: Callable[[], None], stop: threading.Event, backoff_s: float
) -> None:
    """Run `sync_once` until stopped; a failure never ends the watch (it would stop Warden reacting).

    Each failure in a row doubles the wait (up to 5 minutes), so a down API server is not hammered;
    `reset` forgets what the failed watch knew, so the next try starts over.
    """
    failures = 0
    while not stop.is_set():
        try:
            sync_once()
            failures = 0
        except Exception as error:
            wait = min(300.0, backoff_s * 2 ** min(failures, 10))
            failures += 1
            log.warning("%s: %s; again in %.0fs", what, error, wait)
            reset()
            stop.wait(wait)


class Expired(Exception):
    pass


class NodeCache:
    def __init__(
        self,
        kube: Kube,
        resync_s: float = 300,
        watch_timeout_s: int = 60,
        clock: Callable[[], float] = time.time,
        on_signal: Callable[[str], None] | None = None,
    ) -> None:
        self.kube, self.resync_s, self.watch_timeout_s, self.clock = kube, resync_s, watch_timeout_s, clock
        self.on_signal = on_signal
        self.malformed = 0  # watch events skipped because they were not shaped like a Node event
        self._nodes: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.resource_version = ""
        self.listed_at: float | None = None
        self.relists = 0

    def relist(self) -> None:
        items, version = self.kube.list_nodes()
        named: dict[str, dict[str, Any]] = {}
        for node in items:
            if name := _name(node):
                named[name] = node
            else:
                self.malformed += 1  # a list item without a name cannot be a Node Warden acts on
        with self._lock:
            self._nodes = named
            self.resource_version, self.listed_at = version, self.clock()
        self.relists += 1

    def apply(self, event: dict[str, Any]) -> None:
        kind = event.get("type") if isinstance(event, dict) else None
        obj = event.get("object") if isinstance(event, dict) else None
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if kind == "ERROR" and isinstance(obj, dict):
            code = obj.get("code")
            if code == 410:
                raise Expired(str(obj.get("message", "resource version too old")))
            raise ApiError(code if isinstance(code, int) else 0, "WATCH", "/api/v1/nodes", str(obj.get("message", "")))
        if not isinstance(obj, dict) or not isinstance(meta, dict):
            self.malformed += 1
            log.warning("node watch: skipped an event without an object")
            return
        name, version = meta.get("name"), meta.get("resourceVersion", "")
        if kind in ("ADDED", "MODIFIED", "DELETED") and (not isinstance(name, str) or not name):
            self.malformed += 1
            log.warning("node watch: skipped a %s event without a name", kind)
            return
        changed = False
        with self._lock:
            if kind in ("ADDED", "MODIFIED"):
                old = self._nodes.get(str(name))
                self._nodes[str(name)] = obj
                changed = old is None or _key(old) != _key(obj)
            elif kind == "DELETED":
                self._nodes.pop(str(name), None)
            if version and isinstance(version, str):
                self.resource_version = version  # BOOKMARK events carry only this
        if changed and self.on_signal is not None:
            self.on_signal(str(name))

    def store(self, node: dict[str, Any]) -> None:
        """What a patch returned: newer than what the watch has delivered so far."""
        if node.get("metadata", {}).get("name"):
            with self._lock:
                self._nodes[node["metadata"]["name"]] = node

    def sync_once(self) -> None:
        """Relist when due, then follow one watch until the server closes it."""
        if self.listed_at is None or self.clock() - self.listed_at >= self.resync_s:
            self.relist()
        try:
            for event in self.kube.watch("/api/v1/nodes", self.resource_version, self.watch_timeout_s):
                self.apply(event)
        except Expired:
            self.relist()
        except ApiError as error:
            if error.status != 410:
                raise
            self.relist()

    def run(self, stop: threading.Event, backoff_s: float = 5) -> None:
        watch_with_backoff("node watch", self.sync_once, self._forget_listing, stop, backoff_s)

    def _forget_listing(self) -> None:
        self.listed_at = None

    @property
    def synced(self) -> bool:
        return self.listed_at is not None

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._nodes.values())

    def get(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._nodes.get(name)

    def has(self, name: str) -> bool:
        with self._lock:
            return name in self._nodes


def _key(node: dict[str, Any]) -> tuple[Any, ...] | None:
    try:
        return signal_key(node)
    except (AttributeError, TypeError):  # not shaped like a Node: treat as changed, the round will hold it
        return None


def _name(node: Any) -> str:
    meta = node.get("metadata") if isinstance(node, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


class EventWatch:
    """Events with one reason (NCCLFailure) as they are posted: each names a node for a round soon.

    Only a trigger: whether an Event counts is still decided in the round (warden.trust), so a
    forged Event can at most start an early round for a node that exists, nothing more. Events
    naming no known node, or not shaped like an Event, are skipped.
    """

    def __init__(
        self,
        kube: Kube,
        reason: str,
        known: Callable[[str], bool],
        on_signal: Callable[[str], None],
        watch_timeout_s: int = 60,
    ) -> None:
        self.kube, self.reason, self.known, self.on_signal = kube, reason, known, on_signal
        self.watch_timeout_s, self.resource_version = watch_timeout_s, ""
        self.selector = [("fieldSelector", f"reason={reason}")]

    def apply(self, event: dict[str, Any]) -> None:
        obj = event.get("object") if isinstance(event, dict) else None
        if not isinstance(obj, dict):
            return
        if event.get("type") == "ERROR":
            if obj.get("code") == 410:
                raise Expired(str(obj.get("message", "resource version too old")))
            raise ApiError(0, "WATCH", "/api/v1/events", str(obj.get("message", "")))
        meta, source = obj.get("metadata"), obj.get("source")
        if isinstance(meta, dict) and isinstance(meta.get("resourceVersion"), str):
            self.resource_version = meta["resourceVersion"]
        host = source.get("host") if isinstance(source, dict) else None
        wanted = event.get("type") in ("ADDED", "MODIFIED") and obj.get("reason") == self.reason
        if wanted and isinstance(host, str) and 0 < len(host) <= 253 and self.known(host):
            self.on_signal(host)

    def sync_once(self) -> None:
        if not self.resource_version:  # start from now: what is already there, the rounds read anyway
            # One item is enough for the list's resourceVersion; without a limit this read every Event there is.
            listed = self.kube.request("GET", "/api/v1/events", [*self.selector, ("limit", "1")])
            self.resource_version = str((listed.get("metadata") or {}).get("resourceVersion") or "")
        try:
            for event in self.kube.watch("/api/v1/events", self.resource_version, self.watch_timeout_s, self.selector):
                self.apply(event)
        except Expired:
            self.resource_version = ""

    def run(self, stop: threading.Event, backoff_s: float = 5) -> None:
        # A cut Event watch only delays early rounds: the rounds still read Events.
        watch_with_backoff("event watch", self.sync_once, self._forget_version, stop, backoff_s)

    def _forget_version(self) -> None:
        self.resource_version = ""
