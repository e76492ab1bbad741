"""Local HTTP servers standing in for the Kubernetes API server and Compute Engine.

Both keep state (nodes, pods, leases, jobs, events; instances) and record
every request exactly as it arrived, so tests assert on methods, paths,
query strings, content types, credentials and bodies.

Faults to inject, per path substring: `slow` (answer only after sleeping),
`hang` (sleep past the client's timeout, then close the connection without
doing anything, so the outcome is the same whenever the client gave up),
`drop` (close the connection at once without an answer); `hook` runs on every request as it arrives (a test advances its
fake clock there: a "slow" server in simulated time); `clock` stamps each
request (`Request.at`).
"""

from __future__ import annotations

import copy
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tests import httpfake
from tests.httpfake import JsonReplies


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
    at: float = 0.0  # the state's clock when it arrived


class Dropped(Exception):
    """The fake closes the connection without answering."""


@dataclass
class Faults:
    slow: dict[str, float] = field(default_factory=dict)  # path substring -> seconds before answering
    hang: dict[str, float] = field(default_factory=dict)  # path substring -> seconds before dropping unanswered
    drop: set[str] = field(default_factory=set)  # path substrings whose requests get no answer
    hook: Callable[[Request], None] | None = None
    clock: Callable[[], float] = time.monotonic


@dataclass
class ApiState(Faults):
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    leases: dict[str, dict[str, Any]] = field(default_factory=dict)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    watch_events: list[dict[str, Any]] = field(default_factory=list)  # served once to the next watch
    event_watch_events: list[dict[str, Any]] = field(default_factory=list)  # the same, for the Event watch
    pdb_blocked: set[str] = field(default_factory=set)  # pods whose eviction a PDB refuses
    fail_next: list[int] = field(default_factory=list)  # statuses to answer the next mutating requests with
    requests: list[Request] = field(default_factory=list)
    version: int = 100
    user: str = "oncall@meridian.example.com"  # what a SelfSubjectReview answers
    page_size: int = 0  # > 0: no list page holds more, whatever `limit` the client asked (the server may give fewer)
    expire_continue: int = 0  # > 0: the next that many requests with a continue token are answered 410 Expired
    watch_wait_s: float = 0.0  # > 0: a watch with nothing queued waits this long for push_watch()
    watch_ready: threading.Condition = field(default_factory=threading.Condition)
    _selected: tuple[Any, list[dict[str, Any]]] = (None, [])  # events_with's last answer

    def push_watch(self, *events: dict[str, Any], kind: str = "nodes") -> None:
        with self.watch_ready:
            if kind == "nodes":
                self.watch_events += list(events)
            else:
                self.event_watch_events += list(events)
            self.watch_ready.notify_all()

    def bump(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        return obj

    def mutations(self) -> list[Request]:
        return [r for r in self.requests if r.method != "GET"]

    def events_with(self, reason: str) -> list[dict[str, Any]]:
        """The Events with this reason; kept between the pages of one list while no Event is added."""
        key = (reason, len(self.events), id(self.events))
        if self._selected[0] != key:
            self._selected = (key, [e for e in self.events if e.get("reason") == reason])
        return self._selected[1]


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


def _in_namespace(item: dict[str, Any], parts: list[str]) -> bool:
    """Whether an object is in the namespace a path (`.../namespaces/<ns>/...`) names."""
    at = parts.index("namespaces") + 1 if "namespaces" in parts else None
    return at is None or item["metadata"].get("namespace") == parts[at]


def _labelled(items: list[dict[str, Any]], selector: str, namespace: str | None = None) -> list[dict[str, Any]]:
    """Items matching a `key=value` label selector (the only form Warden lists by), in one namespace if given."""
    key, _, value = selector.partition("=")
    return [
        i
        for i in items
        if (i["metadata"].get("labels") or {}).get(key) == value
        and (namespace is None or i["metadata"].get("namespace") == namespace)
    ]


EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
    "results."
)


def list_page(state: ApiState, kind: str, items: list[dict[str, Any]], query: dict[str, str]) -> tuple[int, Any]:
    """One chunk of a list as the API server serves it ("Retrieving large results sets in chunks",
    https://kubernetes.io/docs/reference/using-api/api-concepts/#retrieving-large-results-sets-in-chunks):
    at most `limit` items from where the continue token points, a token while more remain, and for an expired
    token 410 with reason Expired and an inconsistent token (k8s.io/apiserver's etcd3 store, GetList). Without
    `limit`, every item at once: the request a tenant's 200,000 Events turn into 1.1 GiB."""
    token = query.get("continue")
    if token is not None and state.expire_continue > 0:
        state.expire_continue -= 1
        status = {"kind": "Status", "status": "Failure", "reason": "Expired", "code": 410, "message": EXPIRED}
        return 410, {**status, "metadata": {"continue": token}}  # the inconsistent token, which Warden never uses
    start = int(token or 0)
    sizes = [n for n in (int(query.get("limit") or 0), state.page_size) if n > 0]
    end = min(len(items), start + min(sizes)) if sizes else len(items)
    meta: dict[str, Any] = {"resourceVersion": str(state.version)}
    if end < len(items):
        meta |= {"continue": str(end), "remainingItemCount": len(items) - end}
    return 200, {"kind": kind, "metadata": meta, "items": items[start:end]}


class _Handler(JsonReplies):
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
            self.state.clock(),
        )
        self.state.requests.append(request)
        if self.state.hook is not None:
            self.state.hook(request)
        if any(s in request.path for s in self.state.drop):
            raise Dropped(request.path)
        for part, seconds in self.state.hang.items():
            if part in request.path:
                time.sleep(seconds)
                raise Dropped(request.path)
        for part, seconds in self.state.slow.items():
            if part in request.path:
                time.sleep(seconds)
        return request


class FakeApiServer(_Handler):
    state: ApiState

    def do_GET(self) -> None:
        r, s = self._read(), self.state
        parts = r.path.strip("/").split("/")
        if r.path in ("/api/v1/nodes", "/api/v1/events") and r.query.get("watch") == "true":
            queue = "watch_events" if r.path == "/api/v1/nodes" else "event_watch_events"
            with s.watch_ready:
                if not getattr(s, queue) and s.watch_wait_s > 0:
                    s.watch_ready.wait(s.watch_wait_s)
                lines = b"".join(json.dumps(e).encode() + b"\n" for e in getattr(s, queue))
                setattr(s, queue, [])
            return self.send_body(200, lines)
        if r.path == "/api/v1/nodes":
            items = sorted(s.nodes.values(), key=lambda n: n["metadata"]["name"])
            return self.send_json(*list_page(s, "NodeList", items, r.query))
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4:
            found = s.nodes.get(parts[3])
            return self.send_json(200, found) if found else self.send_json(404, {"code": 404})
        if r.path == "/api/v1/pods" and "labelSelector" in r.query:  # label exists (the only form Warden uses)
            items = [p for p in s.pods if r.query["labelSelector"] in (p["metadata"].get("labels") or {})]
            return self.send_json(*list_page(s, "PodList", items, r.query))
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 6 and parts[4] == "pods":
            found = next(
                (p for p in s.pods if (p["metadata"]["namespace"], p["metadata"]["name"]) == (parts[3], parts[5])), None
            )
            return self.send_json(200, found) if found else self.send_json(404, {"kind": "Status", "code": 404})
        if r.path == "/api/v1/pods":  # one node's live pods, or every live pod (all the fake's pods are live)
            wanted = dict(f.split("=", 1) for f in r.query["fieldSelector"].split(",") if "!=" not in f)
            node = wanted.get("spec.nodeName")
            items = [p for p in s.pods if node is None or p["spec"]["nodeName"] == node]
            return self.send_json(*list_page(s, "PodList", items, r.query))
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 5 and parts[4] == "pods":
            return self.send_json(200, {"items": _labelled(s.pods, r.query.get("labelSelector", ""), parts[3])})
        if parts[:2] == ["apis", "batch"] and parts[-1] == "jobs":  # one namespace's, as the path says
            items = _labelled(list(s.jobs.values()), r.query.get("labelSelector", ""), parts[4])
            return self.send_json(200, {"items": items})
        if r.path == "/api/v1/events":
            reason = r.query["fieldSelector"].removeprefix("reason=")
            return self.send_json(*list_page(s, "EventList", s.events_with(reason), r.query))
        store = s.leases if "leases" in parts else s.jobs if "jobs" in parts else None
        if store is not None and parts[-1] in store and _in_namespace(store[parts[-1]], parts):
            return self.send_json(200, store[parts[-1]])
        self.send_json(404, {"kind": "Status", "code": 404})

    def do_PATCH(self) -> None:
        r, s = self._read(), self.state
        if s.fail_next:
            return self.send_json(s.fail_next.pop(0), {"code": 500})
        parts = r.path.strip("/").split("/")
        current = s.nodes.get(parts[3])
        if current is None:
            return self.send_json(404, {"code": 404})
        wanted = ((r.body or {}).get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != current["metadata"].get("resourceVersion"):
            return self.send_json(409, {"kind": "Status", "code": 409, "reason": "Conflict"})  # a precondition failed
        if parts[-1] == "status":  # strategic merge: conditions merge by type
            conditions = {c["type"]: c for c in current["status"].get("conditions", [])}
            for c in r.body["status"]["conditions"]:
                conditions[c["type"]] = c
            current["status"]["conditions"] = list(conditions.values())
        else:
            current.update(merge_patch(current, r.body))
        self.send_json(200, s.bump(current))

    def do_POST(self) -> None:
        r, s = self._read(), self.state
        if s.fail_next:
            return self.send_json(s.fail_next.pop(0), {"code": 500})
        parts = r.path.strip("/").split("/")
        if parts[-1] == "eviction":
            if parts[-2] in s.pdb_blocked:
                return self.send_json(429, {"code": 429, "reason": "TooManyRequests"})
            s.pods = [p for p in s.pods if p["metadata"]["name"] != parts[-2]]
            return self.send_json(201, r.body)
        if parts[-1] == "selfsubjectreviews":  # who the caller is: the fake's one user
            return self.send_json(201, {**r.body, "status": {"userInfo": {"username": s.user}}})
        if parts[-1] == "events":
            s.events.append(r.body)
            return self.send_json(201, r.body)
        store = s.leases if parts[-1] == "leases" else s.jobs
        if not _in_namespace(r.body, parts):  # the API server's "does not match the namespace sent on the request"
            return self.send_json(400, {"code": 400, "reason": "BadRequest"})
        name = r.body["metadata"]["name"]
        if name in store:
            return self.send_json(409, {"code": 409, "reason": "AlreadyExists"})
        store[name] = s.bump(r.body)
        self.send_json(201, store[name])

    def do_PUT(self) -> None:
        r, s = self._read(), self.state
        name = r.path.rsplit("/", 1)[1]
        current = s.leases.get(name)
        if current is None:
            return self.send_json(404, {"code": 404})
        if r.body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            return self.send_json(409, {"code": 409, "reason": "Conflict"})
        s.leases[name] = s.bump(r.body)
        self.send_json(200, s.leases[name])

    def do_DELETE(self) -> None:
        r, s = self._read(), self.state
        parts = r.path.strip("/").split("/")
        found = s.jobs.get(parts[-1])
        if found is not None and _in_namespace(found, parts):
            del s.jobs[parts[-1]]
            return self.send_json(200, {"kind": "Status"})
        self.send_json(404, {"kind": "Status"})


@dataclass
class ComputeState(Faults):
    requests: list[Request] = field(default_factory=list)
    groups: dict[str, str] = field(default_factory=dict)  # instance -> managed instance group
    created_by: dict[str, str] = field(default_factory=dict)  # instance -> created-by value, overrides groups
    # Every POST starts a zonal Operation, named operation-1, -2, ... in order, RUNNING until a test changes it
    # here (status DONE, an `error`); zoneOperations.get answers it as it stands, 404 for a name never given.
    operations: dict[str, dict[str, Any]] = field(default_factory=dict)
    # POSTs whose path ends with a key are refused: HTTP status and Google's error message (its error envelope,
    # https://cloud.google.com/compute/docs/api/how-tos/api-requests-responses#handling_api_errors).
    refuse: dict[str, tuple[int, str]] = field(default_factory=dict)


def compute_error(status: int, message: str) -> dict[str, Any]:
    return {"error": {"code": status, "message": message, "errors": [{"domain": "global", "message": message}]}}


class FakeCompute(_Handler):
    state: ComputeState

    def do_GET(self) -> None:
        r = self._read()
        name = r.path.rsplit("/", 1)[1]
        if r.path.rsplit("/", 2)[1] == "operations":
            found = self.state.operations.get(name)
            if found is None:
                self.send_json(404, compute_error(404, f"The resource '{name}' was not found"))
            else:
                self.send_json(200, found)
            return
        group = self.state.groups.get(name)
        value = self.state.created_by.get(name) or f"projects/123/zones/us-central1-b/instanceGroupManagers/{group}"
        items = [{"key": "created-by", "value": value}] if group or name in self.state.created_by else []
        self.send_json(200, {"name": name, "metadata": {"items": items}})

    def do_POST(self) -> None:
        r = self._read()
        for suffix, (status, message) in self.state.refuse.items():
            if r.path.endswith(suffix):
                self.send_json(status, compute_error(status, message))
                return
        name = f"operation-{len(self.state.operations) + 1}"
        target, _, verb = r.path.rpartition("/")
        operation = {
            "kind": "compute#operation",
            "name": name,
            "operationType": verb,
            "status": "RUNNING",
            "targetLink": f"https://compute.googleapis.com{target}",
        }
        self.state.operations[name] = operation
        self.send_json(200, copy.deepcopy(operation))


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A dropped connection, or a client that gave up on a slow answer, is the fault injected.
        if not isinstance(sys.exc_info()[1], Dropped | BrokenPipeError | ConnectionResetError):
            super().handle_error(request, client_address)


@contextmanager
def serving(handler: type[_Handler], state: ApiState | ComputeState) -> Iterator[str]:
    """Serve `handler` over `state` on a free local port; yields the base URL."""
    bound = type(handler.__name__, (handler,), {"state": state})
    with httpfake.serving(bound, _Server) as url:
        yield url
