"""The researcher's RBAC is exactly what gkr does: derived from the requests gkr sends.

Every gkr command that talks to a cluster runs against the recording API server
of test_kube.py; each request is mapped to the attributes Kubernetes authorizes
(API group, resource, subresource, verb), and the generated roles must grant
all of them and nothing else, apart from the reads listed below with a reason.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from fleet.gitops.teams import QUEUE_VIEWER_ROLE, RESEARCHER_ROLE, team_objects
from fleet.load import load
from gkr import launch
from tests.conftest import SHIPPED
from tests.gkr.conftest import EXAMPLES, use_contexts
from tests.gkr.test_kube import EAST4, FakeApiServer, use_kubeconfig

Access = tuple[str, str, str]  # API group, resource[/subresource], verb
JOB = ("--team", "research", "--region", "us-east4")

# Granted beyond what gkr sends, on purpose: researchers also use kubectl to see why a job waits or fails.
KUBECTL_EXTRAS: dict[Access, str] = {
    **{
        (group, resource, "watch"): "kubectl get -w on what gkr submits"
        for group, resource in (("ray.io", "rayjobs"), ("ray.io", "rayclusters"), ("batch", "jobs"))
    },
    ("", "services", "watch"): "kubectl get -w of the Services gkr creates (a multi-pod Job's, a run's Lighthouse)",
    ("apps", "deployments", "get"): "kubectl describe of a run's Lighthouse",
    ("apps", "deployments", "watch"): "kubectl get -w of a run's Lighthouse",
    ("", "pods", "get"): "kubectl describe pod",
    ("", "pods", "watch"): "kubectl get pods -w",
    ("", "pods", "delete"): "restart a hung pod; its Job or RayCluster recreates it, inside the same admission",
    ("", "events", "get"): "kubectl describe / get events: scheduling and preflight failures",
    ("", "events", "list"): "kubectl describe / get events: scheduling and preflight failures",
    ("", "events", "watch"): "kubectl describe / get events: scheduling and preflight failures",
    **{
        ("kueue.x-k8s.io", resource, verb): "kubectl get workloads/localqueues: why a job is pending"
        for resource in ("workloads", "localqueues")
        for verb in ("get", "list", "watch")
    },
}
CLUSTER_EXTRAS: dict[Access, str] = {
    ("kueue.x-k8s.io", "clusterqueues", "get"): "kubectl get clusterqueue <team>",
    ("kueue.x-k8s.io", "clusterqueues", "watch"): "kubectl get clusterqueues -w",
}


def authorization_attributes(
    method: str, path: str, query: dict[str, list[str]], content_type: str | None
) -> tuple[str, list[Access]]:
    """(namespace or "", accesses) the API server authorizes for a request (its RequestInfo).

    GET on a collection is list (watch with ?watch=true), on a named object get; a log follow is still
    get of pods/log. A server-side apply is a patch, and also a create when the object does not exist
    yet: gkr submits new objects, so both are needed.
    """
    parts = path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    named = len(rest) > 1
    if method in ("GET", "HEAD"):
        verb = "get" if named else ("watch" if query.get("watch") == ["true"] else "list")
    else:
        verb = {
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete" if named else "deletecollection",
        }[method]
    accesses = [(group, resource, verb)]
    if content_type == "application/apply-patch+yaml":
        accesses.append((group, resource, "create"))
    return namespace, accesses


def granted(rules: Iterable[dict[str, Any]]) -> set[Access]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


class ServiceDeletingServer(FakeApiServer):
    """test_kube's recording server; a deleted Service answers with the Service, as the API server does."""

    def do_DELETE(self) -> None:
        request = self._record()
        if "/services/" in request["path"]:
            name = request["path"].rsplit("/", 1)[1]
            self._reply({"kind": "Service", "apiVersion": "v1", "metadata": {"name": name}, "spec": {}})
        else:
            self._reply({"kind": "Status", "apiVersion": "v1", "status": "Success"})


@pytest.fixture
def context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    FakeApiServer.requests = []
    FakeApiServer.queues = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), ServiceDeletingServer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    use_kubeconfig(tmp_path, monkeypatch, EAST4, f"http://127.0.0.1:{httpd.server_port}")
    yield EAST4
    httpd.shutdown()


def _run_everything(gkr: Callable[..., Result], context: str) -> list[dict[str, Any]]:
    """Every gkr command that talks to the cluster, each kind, as a researcher runs them.

    The examples name other regions: --context sends them all to the recording server.
    """
    examples = sorted(p for p in EXAMPLES.glob("*.yaml") if p.name != "cross-region.yaml")  # test_runs: all contexts
    commands: list[tuple[str, ...]] = [
        *(("submit", "-f", str(path), "--context", context) for path in examples),
        # A one-pod Job has no Service.
        ("submit", "-f", str(EXAMPLES / "cpu-data-job.yaml"), "--pods", "1", "--context", context),
        ("preflight", *JOB),
        ("list", *JOB),
        *(("status", "exp-1", "--kind", kind, *JOB) for kind in ("rayjob", "raycluster", "job")),
        ("logs", "exp-1", *JOB),
        ("logs", "exp-1", "--role", "all", "-f", *JOB),
        *(("delete", "exp-1", "--kind", kind, *JOB) for kind in ("rayjob", "raycluster", "job")),
        ("clusters", "--live", "-o", "json"),
    ]
    for command in commands:
        result = gkr(*command)
        assert result.exit_code == 0, (command, result.stderr)
    return FakeApiServer.requests


def _run_across_regions(gkr: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """A run across regions against test_runs' fake clusters: submit (the Lighthouse too), status, logs, delete."""
    from tests.gkr import test_runs

    log: list[dict[str, Any]] = []
    clusters = {c: test_runs.Cluster(c, log) for c in (test_runs.CENTRAL, test_runs.EAST4)}
    for cluster in clusters.values():
        threading.Thread(target=cluster.serve_forever, daemon=True).start()
    servers = {c: f"http://127.0.0.1:{s.server_port}" for c, s in clusters.items()}
    use_contexts(tmp_path, monkeypatch, servers)
    monkeypatch.setattr(launch, "POLL_S", 0.01)
    where = ("--team", "research", "--region", "us-east4")
    commands = [
        ("submit", "-f", test_runs.EXAMPLE),
        ("status", test_runs.RUN, *where),
        ("logs", test_runs.RUN, *where),
        ("delete", test_runs.RUN, *where),
    ]
    try:
        for command in commands:
            result = gkr(*command)
            assert result.exit_code == 0 or command[0] == "logs", (command, result.stderr)  # no pods: exit 2
    finally:
        for cluster in clusters.values():
            cluster.shutdown()
    return log


def test_gkr_needs_exactly_what_the_researcher_roles_grant(
    gkr: Callable[..., Result], context: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "runs").mkdir()
    requests = _run_everything(gkr, context) + _run_across_regions(gkr, tmp_path / "runs", monkeypatch)
    kinds = {r["path"].rsplit("/", 2)[-2] for r in requests if r["method"] == "PATCH"}
    assert kinds == {"rayjobs", "rayclusters", "jobs", "services", "deployments", "secrets"}  # every kind gkr submits
    namespaced: set[Access] = set()
    cluster: set[Access] = set()
    for r in requests:
        namespace, accesses = authorization_attributes(r["method"], r["path"], r["query"], r["content_type"])
        assert namespace == "" or namespace.startswith("team-"), r["path"]  # only team namespaces
        (namespaced if namespace else cluster).update(accesses)
    # What the submissions need, the multi-pod Job's headless Service included.
    assert {("", "services", "patch"), ("", "services", "create"), ("", "services", "delete")} <= namespaced
    assert {("batch", "jobs", "create"), ("ray.io", "rayjobs", "create"), ("ray.io", "rayclusters", "create")} <= (
        namespaced
    )
    loaded = load(SHIPPED)
    fleet = loaded.fleet
    objects = team_objects(loaded, fleet.regions[1])
    roles = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterRole"}
    # The researcher role is bound in the team namespace, the queue viewer cluster-wide, to the team's group.
    bindings = [o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    group = next(t.group for t in fleet.teams if t.name == "research")
    bound = {(b["kind"], b["roleRef"]["name"]) for b in bindings if group in {s["name"] for s in b["subjects"]}}
    assert {("RoleBinding", RESEARCHER_ROLE), ("ClusterRoleBinding", QUEUE_VIEWER_ROLE)} <= bound
    in_namespace = granted(roles[RESEARCHER_ROLE]["rules"])
    cluster_wide = granted(roles[QUEUE_VIEWER_ROLE]["rules"])
    assert namespaced - in_namespace == set(), "gkr is refused these in the team namespace"
    assert cluster - cluster_wide == set(), "gkr is refused these cluster-wide"
    assert in_namespace - namespaced == set(KUBECTL_EXTRAS), "granted beyond gkr without a reason"
    assert cluster_wide - cluster == set(CLUSTER_EXTRAS), "granted beyond gkr without a reason"


def test_authorization_attributes_follow_the_api_server() -> None:
    assert authorization_attributes("GET", "/api/v1/namespaces/t/pods", {}, None) == ("t", [("", "pods", "list")])
    assert authorization_attributes("GET", "/api/v1/namespaces/t/pods", {"watch": ["true"]}, None) == (
        "t",
        [("", "pods", "watch")],
    )
    assert authorization_attributes("GET", "/api/v1/namespaces/t/pods/p/log", {"follow": ["true"]}, None) == (
        "t",
        [("", "pods/log", "get")],
    )
    assert authorization_attributes(
        "PATCH", "/apis/batch/v1/namespaces/t/jobs/j", {}, "application/apply-patch+yaml"
    ) == ("t", [("batch", "jobs", "patch"), ("batch", "jobs", "create")])
    assert authorization_attributes(
        "PATCH", "/apis/batch/v1/namespaces/t/jobs/j", {}, "application/merge-patch+json"
    ) == (
        "t",
        [("batch", "jobs", "patch")],
    )
    assert authorization_attributes("DELETE", "/apis/ray.io/v1/namespaces/t/rayjobs", {}, None) == (
        "t",
        [("ray.io", "rayjobs", "deletecollection")],
    )
    assert authorization_attributes("GET", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues", {}, None) == (
        "",
        [("kueue.x-k8s.io", "clusterqueues", "list")],
    )
    assert authorization_attributes("GET", "/api/v1/namespaces/t", {}, None) == ("", [("", "namespaces", "get")])
