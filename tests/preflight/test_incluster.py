"""contract.incluster: the standard-library Kubernetes client preflight (and the trainer) use inside pods."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from contract import incluster
from tests.httpfake import JsonReplies
from tests.ports import free_port


class _Server(JsonReplies):
    seen: ClassVar[list[dict[str, Any]]] = []
    reply: ClassVar[tuple[int, bytes, float]] = (200, b"{}", 0.0)  # status, body, delay

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        _Server.seen.append({"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body})
        status, text, delay = _Server.reply
        time.sleep(delay)
        self.send_body(status, text)

    do_GET = do_POST = do_PATCH = _answer


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[incluster.Cluster]:
    _Server.seen.clear()
    _Server.reply = (200, b"{}", 0.0)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    token = tmp_path / "token"
    token.write_text("first\n")
    try:
        yield incluster.Cluster(api=f"http://127.0.0.1:{server.server_port}", token_file=str(token))
    finally:
        server.shutdown()


def test_discover_finds_the_service_account_and_the_api_server(tmp_path: Path) -> None:
    assert incluster.discover({}, tmp_path) is None  # not in a pod
    assert incluster.discover({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, tmp_path) is None  # no token mounted
    (tmp_path / "token").write_text("t")
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "6443"}
    assert incluster.discover(env, tmp_path) == incluster.Cluster(
        api="https://10.0.0.1:6443", token_file=str(tmp_path / "token")
    )
    (tmp_path / "ca.crt").write_text("")
    found = incluster.discover({"KUBERNETES_SERVICE_HOST": "fd00::1"}, tmp_path)
    assert found is not None
    assert (found.api, found.ca_file) == ("https://[fd00::1]:443", str(tmp_path / "ca.crt"))


def test_one_json_request_with_the_current_token(cluster: incluster.Cluster, tmp_path: Path) -> None:
    _Server.reply = (200, b'{"metadata": {"name": "n"}}', 0.0)
    patch = {"metadata": {"annotations": {"a": "b"}}}
    reply = incluster.request(cluster, "PATCH", "/api/v1/nodes/n", patch, content_type=incluster.MERGE_PATCH)
    assert reply == {"metadata": {"name": "n"}}
    (tmp_path / "token").write_text("rotated")  # the kubelet rotates projected tokens: read at every request
    _Server.reply = (201, b"", 0.0)
    assert incluster.request(cluster, "GET", "/api/v1/nodes/n") is None
    first, second = _Server.seen
    assert (first["method"], first["path"], json.loads(first["body"])) == ("PATCH", "/api/v1/nodes/n", patch)
    assert first["headers"]["Content-Type"] == "application/merge-patch+json"
    assert first["headers"]["Authorization"] == "Bearer first"
    assert (second["headers"]["Authorization"], second["body"]) == ("Bearer rotated", b"")


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (
            (403, b'{"kind": "Status", "message": "nodes \\"n\\" is forbidden"}', 0.0),
            'HTTP 403: nodes "n" is forbidden',
        ),
        ((500, b"<html>\n oops \n</html>", 0.0), "HTTP 500: <html> oops </html>"),
        ((200, b"not json", 0.0), "GET /x: the reply is not JSON"),
        ((200, b"[" * 100_000, 0.0), "the reply is not JSON"),
        ((200, b"{}", 2.0), "GET /x: TimeoutError"),
    ],
)
def test_every_failure_is_one_api_error_of_one_line(
    cluster: incluster.Cluster, reply: tuple[int, bytes, float], message: str
) -> None:
    _Server.reply = reply
    with pytest.raises(incluster.ApiError) as info:
        incluster.request(cluster, "GET", "/x", timeout=0.5)
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert info.value.status == (reply[0] if reply[0] != 200 else 0)


def test_no_server_and_no_token_are_api_errors_too(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    token = tmp_path / "token"
    token.write_text("t")
    with pytest.raises(incluster.ApiError) as refused:
        incluster.request(
            incluster.Cluster(api=f"http://127.0.0.1:{port}", token_file=str(token)), "GET", "/x", timeout=2
        )
    assert refused.value.status == 0
    assert "GET /x: " in str(refused.value)
    with pytest.raises(incluster.ApiError) as missing:
        incluster.request(incluster.Cluster(api="http://127.0.0.1:1", token_file=str(tmp_path / "none")), "GET", "/x")
    assert "cannot read the service account token" in str(missing.value)
