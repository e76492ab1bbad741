"""NCCL failure Events: how a replica group tells Warden that collectives fail on its node.

When an all-reduce fails in the cluster the worker posts a core/v1 Event
(reason NCCLFailure) on its own pod, with source.host = its node; Warden
counts them per node and quarantines a node that keeps failing. Uses the
pod's service account (Role trainer-events in the team namespace) and the
downward API variables gkr sets (NODE_NAME, POD_NAME, POD_NAMESPACE).
Outside a cluster it does nothing.
"""

from __future__ import annotations

import json
import logging
import ssl
import time
import urllib.request
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

log = logging.getLogger("trainer")
REASON = "NCCLFailure"
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def event_body(pod: str, namespace: str, node: str, message: str, now: float) -> dict[str, Any]:
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{pod}.nccl-", "namespace": namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod, "namespace": namespace},
        "reason": REASON,
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
        account: Path = SERVICE_ACCOUNT,
        interval_s: float = 30.0,
        api: str | None = None,
    ) -> None:
        self.node, self.pod, self.namespace = env.get("NODE_NAME"), env.get("POD_NAME"), env.get("POD_NAMESPACE")
        host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
        self.api = api or (f"https://{host}:{port}" if host else None)
        self.account, self.interval_s, self.last = account, interval_s, float("-inf")

    @property
    def enabled(self) -> bool:
        return bool(self.api and self.node and self.pod and self.namespace and (self.account / "token").exists())

    def report(self, message: str, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        node, pod, namespace = self.node, self.pod, self.namespace
        if not (self.enabled and node and pod and namespace) or now - self.last < self.interval_s:
            return False
        self.last = now
        body = json.dumps(event_body(pod, namespace, node, message, now)).encode()
        request = urllib.request.Request(
            f"{self.api}/api/v1/namespaces/{namespace}/events",
            data=body,
            method="POST",
            headers={
                "Authorization": f"Bearer {(self.account / 'token').read_text().strip()}",
                "Content-Type": "application/json",
            },
        )
        ca = self.account / "ca.crt"
        context = ssl.create_default_context(cafile=str(ca)) if ca.exists() else None
        try:
            with urllib.request.urlopen(request, timeout=5, context=context):
                return True
        except OSError as error:  # reporting must never stop training
            log.warning("could not post the NCCLFailure event: %s", error)
            return False
