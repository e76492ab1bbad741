"""gkr's Kubernetes calls against a local HTTP server that checks the exact requests."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import pytest
from click.testing import Result

from gkr import kube
from tests.gkr.conftest import EXAMPLES, use_contexts
from tests.gkr.jsonhandler import JsonHandler


class FakeApiServer(JsonHandler):
    requests: ClassVar[list[dict[str, Any]]] = []
    queues: ClassVar[list[dict[str, Any]]] = []

    def _record(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        url = urlsplit(self.path)
        request = {
            "method": self.command,
            "path": url.path,
            "query": parse_qs(url.query),
            "content_type": self.headers.get("Content-Type"),
            "authorization": self.headers.get("Authorization"),
            "body": json.loads(body) if body else None,
        }
        FakeApiServer.requests.append(request)
        return request

    def do_PATCH(self) -> None:
        self._reply(self._record()["body"])

    def do_GET(self) -> None:
        request = self._record()
        if request["path"].endswith("/pods"):
            selector = request["query"].get("labelSelector", [""])[0]
            pods = ["exp-1-head-abc"] if "node-type=head" in selector else ["exp-1-head-abc", "exp-1-worker-0"]
            self._reply(
                {
                    "kind": "PodList",
                    "apiVersion": "v1",
                    "metadata": {},
                    "items": [{"metadata": {"name": p}} for p in pods],
                }
            )
        elif request["path"].endswith("/log"):
            data = b"step 1 loss 2.31\nstep 2 loss 2.29\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        elif request["path"].endswith("/clusterqueues"):
            self._reply({"items": FakeApiServer.queues})
        elif request["path"].endswith("/rayjobs"):
            self._reply(
                {
                    "kind": "RayJobList",
                    "items": [
                        {
                            "metadata": {"name": "exp-1", "labels": {"kueue.x-k8s.io/queue-name": "research"}},
                            "status": {"jobDeploymentStatus": "Running"},
                        }
                    ],
                }
            )
        elif request["path"].endswith(("/rayclusters", "/jobs")):
            self._reply({"items": []})
        else:
            self._reply(
                {"metadata": {"name": "exp-1"}, "status": {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}}
            )

    def do_DELETE(self) -> None:
        self._record()
        self._reply({"kind": "Status", "apiVersion": "v1", "status": "Success"})


@pytest.fixture
def server() -> Iterator[str]:
    FakeApiServer.requests = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeApiServer)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()


EAST4 = "gke_meridian-train-prod_us-east4_meridian-us-east4"


def use_kubeconfig(
    folder: Path, monkeypatch: pytest.MonkeyPatch, context: str, server: str, token: str = "t0ken"
) -> None:
    """A kubeconfig with one context (and its cluster and user), made current through $KUBECONFIG."""
    use_contexts(folder, monkeypatch, {context: server}, token)


@pytest.fixture
def kubeconfig(server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """GKE's context name for the us-east4 cluster, pointing at the fake server."""
    use_kubeconfig(tmp_path, monkeypatch, EAST4, server)
    return EAST4


def test_submit_applies_server_side_with_field_manager(gkr: Callable[..., Result], kubeconfig: str) -> None:
    result = gkr("submit", "-f", str(EXAMPLES / "persistent-raycluster.yaml"))
    assert result.exit_code == 0, result.stderr
    assert "submitted raycluster research-dev to team-research" in result.stderr
    (request,) = FakeApiServer.requests
    assert request["method"] == "PATCH"
    assert request["path"] == "/apis/ray.io/v1/namespaces/team-research/rayclusters/research-dev"
    assert request["query"] == {"fieldManager": ["gkr"], "force": ["true"]}
    assert request["content_type"] == "application/apply-patch+yaml"
    assert request["authorization"] == "Bearer t0ken"
    dry = gkr("submit", "-f", str(EXAMPLES / "persistent-raycluster.yaml"), "--dry-run", "-o", "json")
    assert request["body"] == json.loads(dry.stdout)
    assert len(FakeApiServer.requests) == 1  # the dry run sent nothing


def test_indexed_job_applies_its_service_and_job(server: str) -> None:
    api = kube.client(host=server, token="t0ken")
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "tok", "namespace": "team-evals"},
        "spec": {"clusterIP": "None"},
    }
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "tok", "namespace": "team-evals"}, "spec": {}}
    kube.apply(api, service)
    kube.apply(api, job)
    paths = [(r["method"], r["path"], r["content_type"], r["query"]["fieldManager"]) for r in FakeApiServer.requests]
    assert paths == [
        ("PATCH", "/api/v1/namespaces/team-evals/services/tok", "application/apply-patch+yaml", ["gkr"]),
        ("PATCH", "/apis/batch/v1/namespaces/team-evals/jobs/tok", "application/apply-patch+yaml", ["gkr"]),
    ]


def test_list_status_delete(gkr: Callable[..., Result], kubeconfig: str) -> None:
    listed = gkr("list", "--team", "research", "--region", "us-east4")
    assert listed.exit_code == 0, listed.stderr
    assert "exp-1" in listed.stdout
    assert "Running" in listed.stdout
    status = gkr("status", "exp-1", "--team", "research", "--region", "us-east4", "-o", "json")
    assert json.loads(status.stdout) == {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}
    deleted = gkr("delete", "exp-1", "--team", "research", "--region", "us-east4")
    assert deleted.exit_code == 0, deleted.stderr
    methods = [(r["method"], r["path"]) for r in FakeApiServer.requests]
    assert FakeApiServer.requests[0]["query"] == {"labelSelector": ["meridian.dev/team"]}
    assert methods[:3] == [
        ("GET", "/apis/ray.io/v1/namespaces/team-research/rayjobs"),
        ("GET", "/apis/ray.io/v1/namespaces/team-research/rayclusters"),
        ("GET", "/apis/batch/v1/namespaces/team-research/jobs"),
    ]
    assert methods[3:] == [
        ("GET", "/apis/ray.io/v1/namespaces/team-research/rayjobs/exp-1"),
        # delete reads the RayJob first: one region's part of a run across regions takes the whole run with it
        ("GET", "/apis/ray.io/v1/namespaces/team-research/rayjobs/exp-1"),
        ("DELETE", "/apis/ray.io/v1/namespaces/team-research/rayjobs/exp-1"),
    ]
    assert FakeApiServer.requests[-1]["body"]["propagationPolicy"] == "Foreground"


def test_bad_choices_are_bad_input(gkr: Callable[..., Result], kubeconfig: str) -> None:
    result = gkr("logs", "exp-1", "--role", "driver", "--team", "research")
    assert (result.exit_code, result.stderr) == (2, "error: --role 'driver': use one of head, worker, all\n")
    assert gkr("status", "exp-1", "--kind", "pod", "--team", "research").exit_code == 2
    assert FakeApiServer.requests == []


def test_api_errors_are_one_line(gkr: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_kubeconfig(tmp_path, monkeypatch, "c", "http://127.0.0.1:9", token="x")
    result = gkr("submit", "-f", str(EXAMPLES / "persistent-raycluster.yaml"), "--context", "c")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1].startswith("error: applying to c failed: ")


def test_clusters_live_shows_free_quota_per_queue(
    gkr: Callable[..., Result], server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only us-east4 is in the kubeconfig: the other regions read as unreachable.
    use_kubeconfig(tmp_path, monkeypatch, EAST4, server)
    queue = {
        "metadata": {"name": "research"},
        "spec": {
            "resourceGroups": [
                {
                    "flavors": [
                        {
                            "name": "h200-a",
                            "resources": [
                                {"name": "nvidia.com/gpu", "nominalQuota": 768},
                                {"name": "cpu", "nominalQuota": 1},
                            ],
                        }
                    ]
                }
            ]
        },
        "status": {"flavorsUsage": [{"name": "h200-a", "resources": [{"name": "nvidia.com/gpu", "total": 512}]}]},
    }
    FakeApiServer.queues = [queue]
    result = gkr("clusters", "--live", "-o", "json")
    assert result.exit_code == 0, result.stderr
    rows = {row["region"]: row["quota"] for row in json.loads(result.stdout)}
    assert rows["us-east4"]["research"] == {"nominal": 768, "used": 512, "free": 256}
    assert rows["us-east4"]["pretraining"] == {"nominal": 0, "used": 0, "free": 0}
    assert rows["us-central1"]["research"] == "unreachable: no context"
    assert (
        "us-central1: unreachable (no context); run: gcloud container clusters get-credentials meridian-us-central1 "
        "--region us-central1 --project meridian-train-prod --dns-endpoint\n"
    ) in result.stderr
    assert FakeApiServer.requests[0]["path"] == "/apis/kueue.x-k8s.io/v1beta2/clusterqueues"


def test_logs_of_the_head(gkr: Callable[..., Result], kubeconfig: str) -> None:
    result = gkr("logs", "exp-1", "--team", "research", "--region", "us-east4")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "[exp-1-head-abc] step 1 loss 2.31\n[exp-1-head-abc] step 2 loss 2.29\n"
    pods, log = FakeApiServer.requests
    assert pods["path"] == "/api/v1/namespaces/team-research/pods"
    assert pods["query"]["labelSelector"] == ["meridian.dev/job=exp-1,ray.io/node-type=head"]
    assert log["path"] == "/api/v1/namespaces/team-research/pods/exp-1-head-abc/log"


def test_logs_follow_streams_every_pod(gkr: Callable[..., Result], kubeconfig: str) -> None:
    result = gkr("logs", "exp-1", "--role", "all", "-f", "--team", "research", "--region", "us-east4")
    assert result.exit_code == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == [
        "[exp-1-head-abc] step 1 loss 2.31",
        "[exp-1-head-abc] step 2 loss 2.29",
        "[exp-1-worker-0] step 1 loss 2.31",
        "[exp-1-worker-0] step 2 loss 2.29",
    ]
    follows = [r["query"].get("follow") for r in FakeApiServer.requests if r["path"].endswith("/log")]
    assert follows == [["true"], ["true"]]


CENTRAL = "gke_meridian-train-prod_us-central1_meridian-us-central1"


def test_a_job_above_its_pool_share_is_warned_of_and_submitted(
    gkr: Callable[..., Result], server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """research holds 256 of h200-flex's GPUs in us-central1 (1,024 in the region): 320 fit the region, not the pool."""
    use_kubeconfig(tmp_path, monkeypatch, CENTRAL, server)
    result = gkr("submit", "-f", str(EXAMPLES / "flex-start-finetune.yaml"), "--pods", "40")
    assert result.exit_code == 0, result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("warning:")] == [
        "warning: 320 GPUs are more than team research's nominal share of pool h200-flex in us-central1 (256 GPUs); "
        "Kueue may still admit the job by borrowing other teams' idle GPUs there, and preempts it when they reclaim "
        "them: pick a pool with room, or expect to wait"
    ]
    assert [r["method"] for r in FakeApiServer.requests] == ["PATCH"]
    assert result.stderr.endswith("submitted rayjob sft-eval-sweep to team-research\n")
    within = gkr("submit", "-f", str(EXAMPLES / "flex-start-finetune.yaml"), "--pods", "32", "--dry-run")
    assert within.exit_code == 0, within.stderr
    assert "warning:" not in within.stderr  # 256 GPUs: the whole share, no more
