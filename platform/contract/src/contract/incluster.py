"""The Kubernetes API from inside a pod, with the standard library only.

For the programs that cannot carry a Kubernetes client (preflight in a job's
init container, the trainer in a training image): find the API server and
the pod's service account (`discover`), and send one JSON request
(`request`). Every way a request fails (an HTTP status, a timeout, a refused
or dropped connection, a reply that is not JSON, a token that cannot be
read) is one exception, ApiError, whose message is one line.
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
MAX_REPLY = 8 * 1024 * 1024  # a reply larger than this is refused, not read


class ApiError(Exception):
    """A request that did not succeed. `status` is the HTTP status, 0 when there was no answer."""

    def __init__(self, status: int, method: str, path: str, message: str) -> None:
        text = " ".join(message.split())[:300]
        super().__init__(f"{method} {path}: HTTP {status}: {text}" if status else f"{method} {path}: {text}")
        self.status = status


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """Where the API server is and how to prove who we are."""

    api: str  # https://host:port (http:// only for local test servers)
    token_file: str  # read at every request: the kubelet rotates projected service account tokens
    ca_file: str | None = None  # the cluster's CA; None: the system's

    def token(self) -> str:
        return Path(self.token_file).read_text(encoding="utf-8").strip()


def discover(env: Mapping[str, str] = os.environ, account: Path = SERVICE_ACCOUNT) -> Cluster | None:
    """The cluster this pod runs in (KUBERNETES_SERVICE_HOST and a mounted token), or None outside one."""
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
    token = account / "token"
    if not host or not token.is_file():
        return None
    ca = account / "ca.crt"
    host = f"[{host}]" if ":" in host else host  # an IPv6 service address
    return Cluster(api=f"https://{host}:{port}", token_file=str(token), ca_file=str(ca) if ca.is_file() else None)


def request(
    cluster: Cluster,
    method: str,
    path: str,
    body: Any = None,
    *,
    content_type: str = JSON,
    timeout: float = 10.0,
) -> Any:
    """Send `body` as JSON to `path` (e.g. /api/v1/nodes/n); the reply's JSON (None when empty), or ApiError."""
    try:
        token = cluster.token()
    except OSError as error:
        raise ApiError(0, method, path, f"cannot read the service account token: {error.strerror}") from None
    headers = {"Authorization": f"Bearer {token}", "Accept": JSON}
    data = None
    if body is not None:
        data, headers["Content-Type"] = json.dumps(body).encode(), content_type
    url = cluster.api.rstrip("/") + path
    sent = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        context = ssl.create_default_context(cafile=cluster.ca_file) if url.startswith("https:") else None
        with urllib.request.urlopen(sent, timeout=timeout, context=context) as response:
            raw = response.read(MAX_REPLY + 1)
    except urllib.error.HTTPError as error:
        with error:
            detail = error.read(2048).decode(errors="replace")
        raise ApiError(error.code, method, path, _status_message(detail) or error.reason or "") from None
    except (OSError, http.client.HTTPException, ValueError) as error:  # timeouts, refused, reset, TLS, bad URL
        cause = error.reason if isinstance(error, urllib.error.URLError) else error
        raise ApiError(
            0, method, path, f"{type(cause).__name__}: {cause}" if isinstance(cause, Exception) else str(cause)
        ) from None
    if len(raw) > MAX_REPLY:
        raise ApiError(0, method, path, f"reply larger than {MAX_REPLY:,} bytes")
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise ApiError(0, method, path, "the reply is not JSON") from None


def _status_message(text: str) -> str:
    """The `message` of a Kubernetes Status reply, else the text itself."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    message = value.get("message") if isinstance(value, dict) else None
    return message if isinstance(message, str) else text
