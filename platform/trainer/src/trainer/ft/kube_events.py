"""NCCL failure Events: how a replica group tells Warden that collectives fail on its node.

When an all-reduce fails in the cluster the worker posts a core/v1 Event
(reason NCCLFailure) on its own pod, with source.host = its node; Warden
counts them per node and quarantines a node that keeps failing. Uses the
pod's service account (Role trainer-events in the team namespace) and the
downward API variables gkr sets (NODE_NAME, POD_NAME, POD_NAMESPACE).
Outside a cluster it does nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from contract import incluster, names

log = logging.getLogger("trainer")


def event_body(pod: str, namespace: str, node: str, message: str, now: float) -> dict[str, Any]:
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{pod}.nccl-", "namespace": namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod, "namespace": namespace},
        "reason": names.NCCL_FAILURE_REASON,
        "message": message[:1024],
        "type": "Warning",
        "source": {"component": "meridian-trainer", "host": node},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class FailureReporter:
    """Posts at most one Event per `interval_s`: a failing fabric must not flood the API server."""

    def __init__(
        self,
        env: Mapping[str, str],
        account: Path = incluster.SERVICE_ACCOUNT,
        interval_s: float = 30.0,
        api: str | None = None,
    ) -> None:
        self.node, self.pod, self.namespace = (
            env.get(names.NODE_NAME_ENV),
            env.get("POD_NAME"),
            env.get("POD_NAMESPACE"),
        )
        token = account / "token"
        self.cluster = (
            incluster.Cluster(api=api, token_file=str(token))
            if api and token.is_file()
            else incluster.discover(env, account)
        )
        self.interval_s, self.last = interval_s, float("-inf")

    @property
    def enabled(self) -> bool:
        return bool(self.cluster and self.node and self.pod and self.namespace)

    def report(self, message: str, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        node, pod, namespace, cluster = self.node, self.pod, self.namespace, self.cluster
        if not (cluster and node and pod and namespace) or now - self.last < self.interval_s:
            return False
        self.last = now
        body = event_body(pod, namespace, node, message, now)
        try:
            incluster.request(cluster, "POST", f"/api/v1/namespaces/{namespace}/events", body, timeout=5)
            return True
        except incluster.ApiError as error:  # reporting must never stop training
            log.warning("could not post the %s event: %s", names.NCCL_FAILURE_REASON, error)
            return False
