"""Leader election on a coordination.k8s.io Lease, the way client-go does it.

Only the leader acts; the standby takes over when the holder has not renewed
for lease_duration_s. Expiry is judged by when this process last saw the
record change, never by comparing clocks across machines. Updates carry the
Lease's resourceVersion, so two candidates cannot both win.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from warden.kube import ApiError, Kube


def micro_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Elector:
    def __init__(
        self,
        kube: Kube,
        namespace: str,
        identity: str,
        name: str = "warden",
        lease_duration_s: int = 15,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube, self.identity, self.duration, self.clock = kube, identity, lease_duration_s, clock
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self.collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.name, self.namespace = name, namespace
        self._seen: tuple[str, str] | None = None  # (holder, renewTime) last observed
        self._seen_at = 0.0
        self.leading = False

    def _spec(self, now: float, old: dict[str, Any]) -> dict[str, Any]:
        same = old.get("holderIdentity") == self.identity
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.duration,
            "acquireTime": old.get("acquireTime") if same else micro_time(now),
            "renewTime": micro_time(now),
            "leaseTransitions": int(old.get("leaseTransitions") or 0) + (0 if same or not old else 1),
        }

    def step(self) -> bool:
        """Acquire or renew; True while this process leads."""
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
                self.leading = True
                return True
            spec = lease.get("spec") or {}
            observed = (str(spec.get("holderIdentity") or ""), str(spec.get("renewTime") or ""))
            if observed != self._seen:
                self._seen, self._seen_at = observed, now
            holder = observed[0]
            expired = now - self._seen_at > int(spec.get("leaseDurationSeconds") or self.duration)
            if holder and holder != self.identity and not expired:
                self.leading = False
                return False
            lease["spec"] = self._spec(now, spec)
            self.kube.replace(self.path, lease)  # carries metadata.resourceVersion: a race loses with 409
            self._seen, self._seen_at = (self.identity, lease["spec"]["renewTime"]), now
            self.leading = True
            return True
        except ApiError as error:
            if error.status not in (409, 500, 503, 0):
                raise
            self.leading = False
            return False
