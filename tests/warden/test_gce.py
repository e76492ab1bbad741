"""Contract tests of Warden's Compute Engine calls against a local server that checks the exact requests."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from warden.gce import Compute, Instance


class FakeCompute(BaseHTTPRequestHandler):
    requests: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        FakeCompute.requests.append(
            {
                "path": self.path,
                "auth": self.headers["Authorization"],
                "type": self.headers["Content-Type"],
                "body": json.loads(body),
            }
        )
        reply = json.dumps({"kind": "compute#operation", "name": "operation-1", "status": "RUNNING"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def compute() -> Iterator[Compute]:
    FakeCompute.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeCompute)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield Compute(token=lambda: "ya29.test", base=f"http://127.0.0.1:{server.server_port}/compute/v1")
    server.shutdown()


NODE = Instance(
    "meridian-train-prod",
    "us-central1-b",
    "gke-meridian-us-central1-h200-a-1a2b3c4d-x7k9",
    group="gke-meridian-us-central1-h200-a-1a2b3c4d-grp",
)


def test_reset(compute: Compute) -> None:
    assert compute.reset(NODE)["name"] == "operation-1"
    (request,) = FakeCompute.requests
    assert (
        request["path"]
        == "/compute/v1/projects/meridian-train-prod/zones/us-central1-b/instances/gke-meridian-us-central1-h200-a-1a2b3c4d-x7k9/reset"
    )
    assert (request["auth"], request["type"], request["body"]) == ("Bearer ya29.test", "application/json", {})


def test_report_host_as_faulty(compute: Compute) -> None:
    compute.report_host_as_faulty(NODE, "xid 79: GPU has fallen off the bus")
    (request,) = FakeCompute.requests
    assert request["path"].endswith("/instances/gke-meridian-us-central1-h200-a-1a2b3c4d-x7k9/reportHostAsFaulty")
    assert request["body"] == {
        "disruptionSchedule": "IMMEDIATE",
        "faultReasons": [{"behavior": "UNRECOVERABLE_GPU_ERROR", "description": "xid 79: GPU has fallen off the bus"}],
    }


def test_delete_from_managed_instance_group(compute: Compute) -> None:
    compute.delete_from_group(NODE)
    (request,) = FakeCompute.requests
    assert (
        request["path"]
        == "/compute/v1/projects/meridian-train-prod/zones/us-central1-b/instanceGroupManagers/gke-meridian-us-central1-h200-a-1a2b3c4d-grp/deleteInstances"
    )
    assert request["body"] == {
        "instances": ["zones/us-central1-b/instances/gke-meridian-us-central1-h200-a-1a2b3c4d-x7k9"],
        "skipInstancesOnValidationError": True,
    }
    with pytest.raises(ValueError, match="no managed instance group"):
        compute.delete_from_group(Instance("p", "z", "n"))
