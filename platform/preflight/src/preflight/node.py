"""Annotate the Node with a failing check, through the Kubernetes API (in-cluster credentials)."""

from __future__ import annotations

import json
import os
import ssl
import urllib.request
from pathlib import Path

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def patch_annotations(
    api: str, node: str, annotations: dict[str, str], token: str, ca_file: str | None = None, timeout: float = 10
) -> int:
    """Merge-patch the Node's annotations; returns the HTTP status."""
    body = json.dumps({"metadata": {"annotations": annotations}}).encode()
    request = urllib.request.Request(
        f"{api.rstrip('/')}/api/v1/nodes/{node}",
        data=body,
        method="PATCH",
        headers={
            "Content-Type": "application/merge-patch+json",
            "Authorization": f"Bearer {token}",
            "Accept": "application/json",
        },
    )
    context = ssl.create_default_context(cafile=ca_file) if api.startswith("https") else None
    with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
        return int(response.status)


def in_cluster() -> tuple[str, str, str] | None:
    """(API URL, token, CA file) when running in a pod with a service account, else None."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    token = SERVICE_ACCOUNT / "token"
    if not host or not token.is_file():
        return None
    return f"https://{host}:{port}", token.read_text().strip(), str(SERVICE_ACCOUNT / "ca.crt")
