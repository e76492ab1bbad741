"""Warden's HTTP endpoints under a tenant's attack (issue 39): idle and slow clients, more connections than allowed.

The attack: 1,025 idle connections to the health port and /healthz timed out (each held a thread and a file
descriptor of ThreadingHTTPServer until the process had none left), so the kubelet restarted Warden for as long
as they were held. These tests assert behaviour, never timing: a short configured timeout cuts a client, the
connections past the limit and past the process's file descriptors do not stop /healthz.
"""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from warden.httpserve import serve_http

ROUTES = {"/healthz": lambda: (200, "ok\n"), "/metrics": lambda: (200, "warden_rounds_total 1\n")}


@contextmanager
def served(**options: Any) -> Iterator[int]:
    server = serve_http(0, ROUTES, **options)
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()


def get(port: int, path: str = "/healthz") -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=20) as response:
        return response.status, response.read().decode()


def idle(port: int, count: int, sent: bytes = b"") -> list[socket.socket]:
    """`count` connections that send `sent` (nothing: idle) and then wait."""
    held = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        if sent:
            sock.sendall(sent)
        held.append(sock)
    return held


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed this connection (read end of stream or reset) within the socket's timeout."""
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def closed_count(socks: list[socket.socket], at_least: int, within_s: float = 20.0) -> int:
    """How many of ``socks`` the server closed, waiting until ``at_least`` are or ``within_s`` passed: one wait for
    all of them (the server closes them in its own time), not a fixed wait per socket that stays open."""
    open_, closed = list(socks), 0
    deadline = time.monotonic() + within_s
    while open_ and closed < at_least and (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select(open_, [], [], left)
        for sock in readable:
            open_.remove(sock)
            closed += closed_by_server(sock)
    return closed


def test_healthz_and_metrics_answer_and_unknown_paths_are_404() -> None:
    with served() as port:
        assert get(port) == (200, "ok\n")
        assert get(port, "/metrics") == (200, "warden_rounds_total 1\n")
        with pytest.raises(urllib.error.HTTPError) as refused:
            get(port, "/nothing")
        assert refused.value.code == 404


def test_an_idle_client_is_cut_after_the_timeout() -> None:
    with served(timeout_s=0.2) as port:
        quiet, partial = idle(port, 1)[0], idle(port, 1, b"GET /hea")[0]
        assert closed_by_server(quiet)  # the socket waits up to 20 s: a server without a timeout never closes it
        assert closed_by_server(partial)  # a slow request (a byte now and then) has the same deadline
        quiet.close()
        partial.close()


def test_connections_past_the_limit_do_not_stop_healthz() -> None:
    with served(max_connections=8, timeout_s=60) as port:
        held = idle(port, 40)
        try:
            assert get(port) == (200, "ok\n")
            # The oldest were dropped to make room; the limit holds however many arrive.
            assert closed_count(held, 40 - 8) >= 40 - 8
        finally:
            for sock in held:
                sock.close()


def test_a_flood_from_another_address_never_evicts_the_probes_connection() -> None:
    """The kubelet probes from the node's address, a tenant's pod connects from its own: the flood evicts itself.

    The probe here is slow on purpose: connected before the flood, its request sent only after 40 connections
    from 127.0.0.2 went past the limit of 8. Dropping the oldest connection whatever its address would drop it.
    """
    with served(max_connections=8, timeout_s=60) as port:
        probe = socket.create_connection(("127.0.0.1", port), timeout=20)
        flood = []
        try:
            for _ in range(40):
                sock = socket.create_connection(("127.0.0.1", port), timeout=20, source_address=("127.0.0.2", 0))
                flood.append(sock)
            # the flood was accepted (and evicted) before the probe speaks
            assert closed_count(flood, 40 - 7) >= 40 - 7
            probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: warden\r\n\r\n")
            answer = b""
            while chunk := probe.recv(4096):
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200 ")
            assert answer.endswith(b"\r\n\r\nok\n")
        finally:
            probe.close()
            for sock in flood:
                sock.close()


def test_healthz_answers_when_idle_connections_exhaust_the_file_descriptors() -> None:
    """The attack itself, in a process with fewer file descriptors (48) than the default limit of connections (64)."""
    script = textwrap.dedent(
        """
        import resource, sys, time
        resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))
        from warden.httpserve import serve_http
        server = serve_http(0, {"/healthz": lambda: (200, "ok\\n")})
        print(server.server_port, flush=True)
        sys.stdin.read()
        """
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    held: list[socket.socket] = []
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        held = idle(port, 150)
        assert get(port) == (200, "ok\n")
    finally:
        for sock in held:
            sock.close()
        process.kill()
        process.wait()
