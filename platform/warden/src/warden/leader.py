"""Leader election on a coordination.k8s.io Lease, the way client-go does it, with a fence on acting.

Only the leader acts; the standby takes over when the holder has not renewed
for lease_duration_s. Expiry is judged by when this process last saw the
record change, never by comparing clocks across machines. Updates carry the
Lease's resourceVersion, so two candidates cannot both win.

The Lease is renewed by its own thread (`keep`, every retry_period_s, with its
own client and rate limiter), so a round longer than the Lease never lets it
lapse. And no mutating request leaves unless this process still holds the
Lease by its own monotonic clock (`check`, called by the clients before every
write): a renewal counts from the moment it was *sent*, and is trusted only
for renew_deadline_s (10 s) of the 15 s a standby waits from when it *saw*
the renewal, so the old leader stops writing at least 5 s before anyone else
may start, whatever the round is doing. These are client-go's defaults
(LeaseDuration 15 s, RenewDeadline 10 s, RetryPeriod 2 s; k8s.io/client-go/
tools/leaderelection). Like client-go, this is not a fencing token: a request
that leaves in time but is delayed in the network for more than the margin
could still land late.

Whatever the record says, expiry uses this elector's own lease_duration_s, never the record's
leaseDurationSeconds: a negative one would let a standby take over at once while the holder still acts, a
malformed one used to fail every try (the holder's too) and leave no leader. Older client-go did the same
(tryAcquireOrRenew: `le.observedTime.Add(le.config.LeaseDuration)`); current client-go reads the record's value
and relies on the API server refusing leaseDurationSeconds <= 0 (pkg/apis/coordination/validation
ValidateLeaseSpec), which a test double or a future bug need not. A record this elector cannot read (no object
spec, a holder that is not a string) is held by someone unknown until lease_duration_s after this elector first
saw it, like any other holder: never taken at once, never left forever. What this elector writes is always
valid (its own duration, fresh or parseable times, transitions >= 0), so the API server never refuses a renewal
over a field someone else broke.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from contract import names
from warden.kube import ApiError, Kube, LeaseLost

log = logging.getLogger(__package__)


MICRO_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"  # metav1.MicroTime as the API server writes it (RFC 3339, microseconds, UTC)
UNREADABLE = "<unreadable>"  # a holder no pod can be named (no "<" in a DNS name): never this elector


def micro_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime(MICRO_TIME)


def _is_micro_time(value: object) -> bool:
    try:
        return isinstance(value, str) and bool(datetime.strptime(value, MICRO_TIME))
    except ValueError:
        return False


def holder_of(spec: object) -> str | None:
    """Who holds a Lease with this spec: None if nobody (no spec, no or empty holder), UNREADABLE if unknowable."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        return UNREADABLE
    holder = spec.get("holderIdentity")
    if holder is None or holder == "":
        return None
    return holder if isinstance(holder, str) else UNREADABLE


def _record(spec: object) -> str:
    """The whole record as compared between tries: any change to it restarts the wait (client-go compares raw)."""
    return json.dumps(spec, sort_keys=True, default=repr)


class Elector:
    def __init__(
        self,
        kube: Kube,
        namespace: str,
        identity: str,
        name: str = names.WARDEN_KSA,  # the Lease is named after the service
        lease_duration_s: int = 15,
        clock: Callable[[], float] = time.time,
        renew_deadline_s: float = 10,
        retry_period_s: float = 2,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        if not 0 < renew_deadline_s < lease_duration_s:
            raise ValueError("renew_deadline_s must be > 0 and below lease_duration_s")
        self.kube, self.identity, self.duration, self.clock = kube, identity, lease_duration_s, clock
        self.renew_deadline, self.retry_period = renew_deadline_s, retry_period_s
        # Tests pass one fake clock for both; in production validity is judged on the monotonic clock.
        self.monotonic = monotonic or (time.monotonic if clock is time.time else clock)
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self.collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.name, self.namespace = name, namespace
        self._seen: str | None = None  # the record last observed (_record)
        self._seen_at = 0.0
        self._valid_until = float("-inf")  # monotonic: writes allowed before this
        self._lock = threading.Lock()
        self.leading = False
        self.renewals = 0

    def _spec(self, now: float, old: object) -> dict[str, Any]:
        """The record this elector writes: only the old transitions and acquire time, when they are valid."""
        old = old if isinstance(old, dict) else {}
        same = holder_of(old) == self.identity
        acquired = old.get("acquireTime")
        transitions = old.get("leaseTransitions")
        if type(transitions) is not int or transitions < 0:
            transitions = 0
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.duration,
            "acquireTime": acquired if same and _is_micro_time(acquired) else micro_time(now),
            "renewTime": micro_time(now),
            "leaseTransitions": transitions + (0 if same or not old else 1),
        }

    def _won(self, sent_at: float) -> None:
        with self._lock:
            self.leading = True
            self._valid_until = max(self._valid_until, sent_at + self.renew_deadline)
            self.renewals += 1

    def _lost(self) -> None:
        with self._lock:
            self.leading = False
            self._valid_until = float("-inf")

    def holds(self) -> bool:
        """True while this process may act: it won or renewed the Lease less than renew_deadline_s ago."""
        with self._lock:
            return self.leading and self.monotonic() < self._valid_until

    def check(self) -> None:
        """Called before every mutating request (Kube and Compute `guard`)."""
        if not self.holds():
            raise LeaseLost(f"{self.identity} no longer holds the Lease {self.namespace}/{self.name}")

    def step(self) -> bool:
        """Acquire or renew once; True while this process leads. Never raises: a failed try is tried again."""
        sent_at = self.monotonic()  # before the request: the renewal can only have landed later
        now = self.clock()
        try:
            lease = self.kube.get(self.path)
            if lease is None:
                body = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(now, {}),
                }
                self.kube.create(self.collection, body)
                self._won(sent_at)
                return True
            spec = lease.get("spec")
            holder, observed = holder_of(spec), _record(spec)
            if observed != self._seen:
                if holder == UNREADABLE:
                    log.warning(
                        "lease %s/%s: unreadable record, held until %ss from now",
                        self.namespace,
                        self.name,
                        self.duration,
                    )
                self._seen, self._seen_at = observed, sent_at
            # client-go: held while observedTime + LeaseDuration is after now; ours, not the record's.
            if holder is not None and holder != self.identity and sent_at - self._seen_at <= self.duration:
                self._lost()
                return False
            lease["spec"] = self._spec(now, spec)
            self.kube.replace(self.path, lease)  # carries metadata.resourceVersion: a race loses with 409
            self._seen, self._seen_at = _record(lease["spec"]), sent_at
            self._won(sent_at)
            return True
        except (ApiError, ValueError, TypeError, AttributeError) as error:
            # A failed renewal does not end leadership by itself: holds() does, once renew_deadline_s has passed.
            log.warning("lease %s/%s: %s", self.namespace, self.name, error)
            return self.holds()

    def keep(self, stop: threading.Event) -> None:
        """The renewal loop, run in its own thread for as long as the service runs."""
        while not stop.is_set():
            try:
                self.step()
            except Exception as error:  # the renewal thread must outlive anything one try can raise
                log.exception("lease %s/%s: %s", self.namespace, self.name, error)
            stop.wait(self.retry_period)
