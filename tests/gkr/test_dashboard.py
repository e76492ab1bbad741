"""gkr dashboard: the head Service found through the API, and the kubectl port-forward it would run."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import Result

from gkr import kube
from gkr.commands import dashboard
from tests.gkr.test_kube import EAST4, FakeApiServer, use_kubeconfig


class RayApiServer(FakeApiServer):
    def do_GET(self) -> None:
        if self.path.endswith("/rayjobs/exp-1"):
            self._record()
            self._reply({"metadata": {"name": "exp-1"}, "status": {"rayClusterName": "exp-1-raycluster-x7k2p"}})
        elif self.path.endswith("/rayjobs/queued"):
            self._record()
            self._reply({"metadata": {"name": "queued"}, "status": {"jobDeploymentStatus": "Suspended"}})
        elif "/services/" in self.path:
            self._record()
            ports = [{"name": "gcs-server", "port": 6379}, {"name": "dashboard", "port": 8265}]
            self._reply({"metadata": {"name": self.path.rsplit("/", 1)[1]}, "spec": {"ports": ports}})
        else:
            super().do_GET()


@pytest.fixture
def ray_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[list[str]]]:
    """A fake API server in the us-east4 context; yields the commands gkr would have run."""
    FakeApiServer.requests = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), RayApiServer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    use_kubeconfig(tmp_path, monkeypatch, EAST4, f"http://127.0.0.1:{httpd.server_port}")
    ran: list[list[str]] = []

    def run(command: list[str]) -> int:  # never forward for real
        ran.append(command)
        return 0

    monkeypatch.setattr(dashboard, "run", run)
    monkeypatch.setattr(kube, "kubectl", lambda: "/venv/bin/kubectl")
    yield ran
    httpd.shutdown()


WHERE = ("--team", "research", "--region", "us-east4")


def test_dashboard_of_a_rayjob(gkr: Callable[..., Result], ray_api: list[list[str]]) -> None:
    result = gkr("dashboard", "exp-1", *WHERE)
    assert result.exit_code == 0, result.stderr
    assert ray_api == [
        [
            "/venv/bin/kubectl",
            "--context",
            EAST4,
            "--namespace",
            "team-research",
            "port-forward",
            "service/exp-1-raycluster-x7k2p-head-svc",
            "8265:8265",
        ]
    ]
    assert [r["path"] for r in FakeApiServer.requests] == [
        "/apis/ray.io/v1/namespaces/team-research/rayjobs/exp-1",
        "/api/v1/namespaces/team-research/services/exp-1-raycluster-x7k2p-head-svc",
    ]
    assert "http://localhost:8265" in result.stderr


def test_dashboard_of_a_raycluster_on_another_port(gkr: Callable[..., Result], ray_api: list[list[str]]) -> None:
    result = gkr("dashboard", "research-dev", "--kind", "raycluster", "--port", "9000", *WHERE)
    assert result.exit_code == 0, result.stderr
    assert ray_api[0][-2:] == ["service/research-dev-head-svc", "9000:8265"]
    assert [r["path"] for r in FakeApiServer.requests] == [
        "/api/v1/namespaces/team-research/services/research-dev-head-svc"
    ]


def test_a_queued_rayjob_has_no_dashboard_yet(gkr: Callable[..., Result], ray_api: list[list[str]]) -> None:
    result = gkr("dashboard", "queued", *WHERE)
    assert (result.exit_code, ray_api) == (1, [])
    assert result.stderr == (
        "error: rayjob queued has no Ray cluster yet (queued?); `gkr status queued` says where it is\n"
    )
    assert gkr("dashboard", "x", "--kind", "job", *WHERE).exit_code == 2
