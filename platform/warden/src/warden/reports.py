"""Tenants' reports (NCCLFailure Events, failed preflight init containers), read apart from the rounds.

Teams decide how long this read takes: Events have no count quota, and 200,000 of them were 380 list
pages and 500 pod lookups, 42 s at the service's 20 requests/s, during which the service's one loop ran
no round, not even the one a watch event asks for 2 s after a real fault (issue 39). So `warden serve`
reads them in a thread of its own, through a client with its own rate limit (`--reports-qps`), and each
round takes the verdicts last read: a flood of Events makes the verification requests later, never the
node decisions. Without a reader (tests, `--once`) the round reads them itself, as before.

What the read keeps is bounded whatever the lists hold: a page at a time (warden.kube), and what
warden.trust keeps of it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from contract import names
from warden.kube import ApiError, Kube, relisting
from warden.metrics import WardenMetrics
from warden.policy import Policy
from warden.trust import Verdicts, nccl_failures, preflight_failures

log = logging.getLogger(__package__)


def read_reports(kube: Kube, policy: Policy, now: float) -> Verdicts:
    """Tenants' reports, each checked against the pod the cluster placed (warden.trust): requests only.

    Raises ApiError when they cannot be read (a list that kept expiring part-way among them).
    """

    def read() -> Verdicts:  # from nothing each time: a list that expired part-way is read again whole
        verdicts = Verdicts()
        events = kube.events(f"reason={names.NCCL_FAILURE_REASON}")  # a page at a time, never all
        nccl_failures(events, kube.pod, now, policy.window_s, verdicts)
        preflight_failures(kube.pods_labelled(names.TEAM_LABEL), now, policy.window_s, verdicts)
        return verdicts

    return relisting(read)


def counted(verdicts: Verdicts, metrics: WardenMetrics) -> Verdicts:
    """The verdicts, with what they ignored counted in warden_signals_ignored_total (once per read)."""
    for reason, count in verdicts.ignored.items():
        metrics.ignored.inc(count, reason=reason)
    return verdicts


class TenantReports:
    """The latest verdicts, refreshed every `every_s` by `run` in its own thread while this replica leads."""

    def __init__(
        self,
        kube: Kube,
        policy: Policy,
        metrics: WardenMetrics,
        every_s: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube, self.policy, self.metrics, self.every_s, self.clock = kube, policy, metrics, every_s, clock
        self._latest = Verdicts()
        self._lock = threading.Lock()
        self.reads = 0

    def refresh(self) -> None:
        """One read; on an API error the last verdicts stay (they age out of the policy's window by their times)."""
        try:
            verdicts = counted(read_reports(self.kube, self.policy, self.clock()), self.metrics)
        except ApiError as error:
            self.metrics.api_errors.inc()
            log.warning("tenant reports not read: %s", error)
            return
        with self._lock:
            self._latest = verdicts
        self.reads += 1

    def latest(self) -> Verdicts:
        with self._lock:
            return self._latest

    def run(self, stop: threading.Event, active: Callable[[], bool] = lambda: True) -> None:
        while not stop.is_set():
            if active():
                try:
                    self.refresh()
                except Exception as error:  # the reader outlives any one read, as the rounds do
                    self.metrics.node_errors.inc(stage="reports")
                    log.exception("tenant reports failed: %s", error)
            stop.wait(self.every_s)
