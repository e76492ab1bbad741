"""Local HTTP servers standing in for the Kubernetes API server and Compute Engine.

Both keep state (nodes, pods, leases, jobs, events; instances) and record
every request exactly as it arrived, so tests assert on methods, paths,
query strings, content types, credentials and bodies.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    content_type: str
    auth: str
    body: Any


@dataclass
class ApiState:
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    leases: dict[str, dict[str, Any]] = field(default_factory=dict)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    watch_events: list[dict[str, Any]] = field(default_factory=list)  # served once to the next watch
    pdb_blocked: set[str] = field(default_factory=set)  # pods whose eviction a PDB refuses
    fail_next: list[int] = field(default_factory=list)  # statuses to answer the next mutating requests with
    requests: list[Request] = field(default_factory=list)
    version: int = 100
    page_size: int = 0  # > 0: list nodes in pages

    def bump(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        return obj

    def mutations(self) -> list[Request]:
        return [r for r in self.requests if r.method != "GET"]


def node(name: str, pool: str = "h200-a", gpus: int = 8, boot: str = "boot-1", **extra: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": {"cloud.google.com/gke-nodepool": pool, "topology.kubernetes.io/zone": "us-central1-b"},
            "annotations": {},
        },
        "spec": {"providerID": f"gce://meridian-train-prod/us-central1-b/{name}"},
        "status": {
            "capacity": {"nvidia.com/gpu": str(gpus)},
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"bootID": boot},
        },
    }
    return merge_patch(obj, extra)  # type: ignore[no-any-return]


def pod(
    name: str, node_name: str, gpus: int = 8, daemonset: bool = False, namespace: str = "research", **extra: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}"}
    if daemonset:
        meta["ownerReferences"] = [{"kind": "DaemonSet", "name": "gib-installer"}]
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    obj = {
        "metadata": meta,
        "spec": {"nodeName": node_name, "containers": [{"name": "c", "resources": {"limits": limits}}]},
        "status": {"phase": "Running"},
    }
    return merge_patch(obj, extra)  # type: ignore[no-any-return]


class _Handler(BaseHTTPRequestHandler):
    state: Any  # ApiState or ComputeState: has .requests

    def _read(self) -> Request:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        request = Request(
            self.command,
            url.path,
            dict(parse_qsl(url.query)),
            self.headers.get("Content-Type", ""),
            self.headers.get("Authorization", ""),
            json.loads(raw) if raw else None,
        )
        self.state.requests.append(request)
        return request

    def _reply(self, status: int, payload: Any) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class FakeApiServer(_Handler):
    state: ApiState

    def do_GET(self) -> None:
        r, s = self._read(), self.state
        parts = r.path.strip("/").split("/")
        if r.path == "/api/v1/nodes" and r.query.get("watch") == "true":
            lines = b"".join(json.dumps(e).encode() + b"\n" for e in s.watch_events)
            s.watch_events = []
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(lines)))
            self.end_headers()
            self.wfile.write(lines)
            return
        if r.path == "/api/v1/nodes":
            items = sorted(s.nodes.values(), key=lambda n: n["metadata"]["name"])
            start = int(r.query.get("continue", "0"))
            size = s.page_size or len(items) or 1
            page = items[start : start + size]
            more = start + size < len(items)
            meta = {"resourceVersion": str(s.version), **({"continue": str(start + size)} if more else {})}
            return self._reply(200, {"kind": "NodeList", "metadata": meta, "items": page})
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4:
            found = s.nodes.get(parts[3])
            return self._reply(200, found) if found else self._reply(404, {"code": 404})
        if r.path == "/api/v1/pods" and "labelSelector" in r.query:  # label exists (the only form Warden uses)
            items = [p for p in s.pods if r.query["labelSelector"] in (p["metadata"].get("labels") or {})]
            return self._reply(200, {"items": items})
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 6 and parts[4] == "pods":
            found = next(
                (p for p in s.pods if (p["metadata"]["namespace"], p["metadata"]["name"]) == (parts[3], parts[5])), None
            )
            return self._reply(200, found) if found else self._reply(404, {"kind": "Status", "code": 404})
        if r.path == "/api/v1/pods":
            wanted = dict(f.split("=", 1) for f in r.query["fieldSelector"].split(",") if "!=" not in f)
            items = [p for p in s.pods if p["spec"]["nodeName"] == wanted["spec.nodeName"]]
            return self._reply(200, {"items": items})
        if r.path == "/api/v1/events":
            reason = r.query["fieldSelector"].removeprefix("reason=")
            return self._reply(200, {"items": [e for e in s.events if e.get("reason") == reason]})
        store = s.leases if "leases" in parts else s.jobs if "jobs" in parts else None
        if store is not None and parts[-1] in store:
            return self._reply(200, store[parts[-1]])
        self._reply(404, {"kind": "Status", "code": 404})

    def do_PATCH(self) -> None:
        r, s = self._read(), self.state
        if s.fail_next:
            return self._reply(s.fail_next.pop(0), {"code": 500})
        parts = r.path.strip("/").split("/")
        current = s.nodes.get(parts[3])
        if current is None:
            return self._reply(404, {"code": 404})
        if parts[-1] == "status":  # strategic merge: conditions merge by type
            conditions = {c["type"]: c for c in current["status"].get("conditions", [])}
            for c in r.body["status"]["conditions"]:
                conditions[c["type"]] = c
            current["status"]["conditions"] = list(conditions.values())
        else:
            current.update(merge_patch(current, r.body))
        self._reply(200, s.bump(current))

    def do_POST(self) -> None:
        r, s = self._read(), self.state
        if s.fail_next:
            return self._reply(s.fail_next.pop(0), {"code": 500})
        parts = r.path.strip("/").split("/")
        if parts[-1] == "eviction":
            if parts[-2] in s.pdb_blocked:
                return self._reply(429, {"code": 429, "reason": "TooManyRequests"})
            s.pods = [p for p in s.pods if p["metadata"]["name"] != parts[-2]]
            return self._reply(201, r.body)
        if parts[-1] == "events":
            s.events.append(r.body)
            return self._reply(201, r.body)
        store = s.leases if parts[-1] == "leases" else s.jobs
        name = r.body["metadata"]["name"]
        if name in store:
            return self._reply(409, {"code": 409, "reason": "AlreadyExists"})
        store[name] = s.bump(r.body)
        self._reply(201, store[name])

    def do_PUT(self) -> None:
        r, s = self._read(), self.state
        name = r.path.rsplit("/", 1)[1]
        current = s.leases.get(name)
        if current is None:
            return self._reply(404, {"code": 404})
        if r.body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            return self._reply(409, {"code": 409, "reason": "Conflict"})
        s.leases[name] = s.bump(r.body)
        self._reply(200, s.leases[name])

    def do_DELETE(self) -> None:
        r, s = self._read(), self.state
        found = s.jobs.pop(r.path.rsplit("/", 1)[1], None)
        self._reply(200 if found else 404, {"kind": "Status"})


@dataclass
class ComputeState:
    requests: list[Request] = field(default_factory=list)
    groups: dict[str, str] = field(default_factory=dict)  # instance -> managed instance group


class FakeCompute(_Handler):
    state: ComputeState

    def do_GET(self) -> None:
        r = self._read()
        name = r.path.rsplit("/", 1)[1]
        group = self.state.groups.get(name)
        items = [{"key": "created-by", "value": f"projects/123/zones/us-central1-b/instanceGroupManagers/{group}"}]
        self._reply(200, {"name": name, "metadata": {"items": items if group else []}})

    def do_POST(self) -> None:
        self._read()
        self._reply(200, {"kind": "compute#operation", "name": "operation-1", "status": "RUNNING"})


@contextmanager
def serving(handler: type[_Handler], state: ApiState | ComputeState) -> Iterator[str]:
    """Serve `handler` over `state` on a free local port; yields the base URL."""
    bound = type(handler.__name__, (handler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), bound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
