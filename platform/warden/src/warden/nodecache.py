"""Every Node, kept current by a watch and made whole again by a periodic relist (resync).

A watch can miss nothing it was sent, but it can end, fall behind (HTTP 410
Gone) or be cut; relisting every `resync_s` repairs any drift. Warden also
stores the objects its own patches return, so a round never acts on a record
older than what it just wrote.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from warden.kube import ApiError, Kube

log = logging.getLogger("warden")


class Expired(Exception):
    pass


class NodeCache:
    def __init__(
        self, kube: Kube, resync_s: float = 300, watch_timeout_s: int = 60, clock: Callable[[], float] = time.time
    ) -> None:
        self.kube, self.resync_s, self.watch_timeout_s, self.clock = kube, resync_s, watch_timeout_s, clock
        self._nodes: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.resource_version = ""
        self.listed_at: float | None = None
        self.relists = 0

    def relist(self) -> None:
        items, version = self.kube.list_nodes()
        with self._lock:
            self._nodes = {n["metadata"]["name"]: n for n in items}
            self.resource_version, self.listed_at = version, self.clock()
        self.relists += 1

    def apply(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Expired(obj.get("message", "resource version too old"))
            raise ApiError(int(obj.get("code", 0)), "WATCH", "/api/v1/nodes", str(obj.get("message", "")))
        version = obj.get("metadata", {}).get("resourceVersion", "")
        with self._lock:
            if kind in ("ADDED", "MODIFIED"):
                self._nodes[obj["metadata"]["name"]] = obj
            elif kind == "DELETED":
                self._nodes.pop(obj["metadata"]["name"], None)
            if version:
                self.resource_version = version  # BOOKMARK events carry only this

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
        while not stop.is_set():
            try:
                self.sync_once()
            except Exception as error:  # a cut watch must never stop Warden
                log.warning("node watch: %s; relisting in %.0fs", error, backoff_s)
                self.listed_at = None
                stop.wait(backoff_s)

    @property
    def synced(self) -> bool:
        return self.listed_at is not None

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._nodes.values())

    def get(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._nodes.get(name)
