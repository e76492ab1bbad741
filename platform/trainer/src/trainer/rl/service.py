"""The controller over HTTP (JSON bodies), the TCP store the weight pairs meet in, and the client for both sides.

One lock around the controller: every call is short (scoring a lease's groups is the longest). The calls
that wait (a step's batch, a group's transfers, a generator's lease) wait outside it, on a condition that every
change signals, and answer "wait" after ``POLL_S`` so that no request outlives a dead peer by long. (A generator
once slept 0.2 s between asks, longer than a step of the arithmetic task: trainer and generators took turns
waiting for each other, issue 41.) A request
that is not one of ours (unknown path, body over ``MAX_BODY``, not JSON, a refused generator answer)
gets a 4xx with one line, and is one log line here: the run goes on.
"""

from __future__ import annotations

import http.client
import json
import logging
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from contract.problem import Invalid
from trainer.config import MAX_STEPS
from trainer.rl.controller import Committed, Controller
from trainer.rl.metrics import RLMetrics
from trainer.rl.wire import Refused

log = logging.getLogger("trainer.rl")
MAX_BODY = 64 * 2**20
POLL_S = 2.0
IDLE_S = 120.0  # a connection with no request for this long is closed, and its server thread ends


class Service:
    """The controller served on ``host``:``port`` (0: a free one), with a TCP store beside it for weight pairs."""

    def __init__(
        self,
        controller: Controller,
        *,
        host: str = "localhost",
        port: int = 0,
        advertise: str = "",
        on_commit: Callable[[Committed], None] = lambda c: None,
        on_lease: Callable[[str, dict[str, float]], None] = lambda g, s: None,
        on_greedy: Callable[[int, int, float, float], None] = lambda g, s, a, t: None,
        metrics: RLMetrics | None = None,
        poll_s: float = POLL_S,
    ) -> None:
        from trainer.distributed.listen import store_on

        self.controller, self.on_commit, self.on_lease, self.metrics = controller, on_commit, on_lease, metrics
        self.on_greedy = on_greedy  # (group, step, held-out greedy accuracy, seconds): evaluation.py's result
        self.advertise = advertise  # the address others reach it at, when it listens on every interface
        self.poll_s = poll_s  # how long a waiting call waits for a change before it answers "wait"
        self.changed = threading.Condition()
        self.store = store_on(host, timeout=timedelta(seconds=60))  # where the server listens, nowhere else
        self.server = _Server((host, port), _handler(self))
        self.thread = threading.Thread(target=self.server.serve_forever, name="rl-controller", daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{self.advertise or host!s}:{port}"

    def call(self, method: Callable[..., Any], *args: Any) -> Any:
        """Run a controller method under the lock, then wake every waiting request."""
        with self.changed:
            result = method(*args)
            self.changed.notify_all()
            return result

    def wait_for(self, ask: Callable[[], Any]) -> Any:
        """``ask()`` under the lock until it is not None or ``poll_s`` passed (then None). An answer may have changed
        the state (a batch formed leaves room for leases; a lease issued prompts): the other waiters look again.
        The 0.5 s bound on each wait is for what changes with time alone (a lease expiring)."""
        deadline = time.monotonic() + self.poll_s
        with self.changed:
            while (answer := ask()) is None and (left := deadline - time.monotonic()) > 0:
                self.changed.wait(min(left, 0.5))
            if answer is not None:
                self.changed.notify_all()
            return answer

    def handle(self, path: str, body: dict[str, Any]) -> Any:
        c = self.controller
        if path == "/start":
            started = self.call(c.start, int(body["group"]), str(body["token"]), int(body["step"]), body.get("state"))
            return started | {"store": self.store.port}
        if path == "/batch":
            return self.wait_for(lambda: c.batch(int(body["step"]))) or {"wait": True}
        if path == "/committed":
            answer, ready = self.call(c.committed, int(body["group"]), int(body["step"]), dict(body.get("stats", {})))
            for committed in ready:
                self.on_commit(committed)
            return answer
        if path == "/greedy":
            self.on_greedy(int(body["group"]), int(body["step"]), float(body["greedy"]), float(body["seconds"]))
            return {}
        if path == "/transfers":
            group, token = int(body["group"]), str(body["token"])
            return {"transfers": self.wait_for(lambda: c.transfers(group, token) or None) or []}
        if path == "/lease":
            generator = str(body["generator"])[:200]
            self.on_lease(generator, {k: float(v) for k, v in dict(body.get("seconds", {})).items()})
            held, members = _held(body), _members(body)
            answer = self.call(c.lease, generator, held, bool(body.get("sync_failed", False)), members)
            if "wait" in answer:  # hold the ask until there is work (its failed sync, if any, was taken above)
                answer = self.wait_for(lambda: _work(c.lease(generator, held, False, members))) or answer
            return answer | {"store": self.store.port}
        if path == "/result":
            return {"kept": self.call(c.result, str(body["generator"])[:200], body)}
        raise Invalid([f"{path[:80]}: no such endpoint"])

    def refused(self, error: Refused) -> None:
        """One log line per refused answer, with its generator's count so far, and the metric."""
        log.warning(
            "controller: refused an answer of %s (%s; %d refused from it): %s",
            error.generator, error.reason, error.count, error.lines[0],
        )  # fmt: skip
        if self.metrics is not None:
            self.metrics.refused(error.generator, error.reason)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A peer that went away mid-request (a killed generator or group: the launcher already says so) is one
        log line, not socketserver's traceback on the console; anything else is a bug and keeps its traceback."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError):
            log.info("controller: %s went away mid-request (%s)", client_address[0], type(error).__name__)
            return
        super().handle_error(request, client_address)


def _work(answer: dict[str, Any]) -> dict[str, Any] | None:
    """A lease answer that gives the generator something to do; None for "wait"."""
    return None if "wait" in answer else answer


def _byte_count(said: str) -> int:
    """A Content-Length as a number: -1 where it is not digits, MAX_BODY + 1 past 12 of them (int() of 5,000
    digits raises)."""
    if not (said.isascii() and said.isdigit()):
        return -1
    return int(said) if len(said) <= 12 else MAX_BODY + 1


def _held(body: dict[str, Any]) -> int:
    """The policy version a generator says it holds: -1 (none yet) or a step number (run.steps' bound)."""
    held = body["held"]
    if isinstance(held, bool) or not isinstance(held, int) or not -1 <= held <= MAX_STEPS:
        raise Invalid([f"/lease: held {str(held)[:20]!r} is not a policy version -1..{MAX_STEPS}"])
    return held


def _members(body: dict[str, Any]) -> int:
    """A generator's receiving processes (its pair is 1 + this): an int 1..64 (MERIDIAN_TP's bounds)."""
    members = body.get("members", 1)
    if isinstance(members, bool) or not isinstance(members, int) or not 1 <= members <= 64:
        raise Invalid([f"/lease: members {str(members)[:20]!r} is not a process count 1..64"])
    return members


def _handler(service: Service) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep the connection: every answer has its Content-Length
        timeout = IDLE_S
        # Headers and body in one write (http.server flushes after each request): two writes were two loopback
        # packets, and Nagle held the second for the client's delayed ACK, 40 ms. NODELAY: for larger answers.
        wbufsize = 64 * 2**10
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            if self.path != "/metrics" or service.metrics is None:
                return self._answer(404, {"error": "GET serves /metrics only"})
            from telemetry.exposition import render

            data = render(service.metrics.registry).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            said = str(self.headers.get("Content-Length") or "0")
            length = _byte_count(said)
            if not 0 <= length <= MAX_BODY:
                self.close_connection = True  # the body stays unread: it must not be taken for the next request
                if length < 0:
                    return self._answer(400, {"error": f"Content-Length {said[:20]!r} is not a byte count"})
                return self._answer(413, {"error": f"body of {length} bytes; at most {MAX_BODY}"})
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
                if not isinstance(body, dict):
                    raise Invalid(["the body is not a JSON object"])
                answer = service.handle(self.path, body)
            except Refused as error:  # a generator's answer: it is told why, and counted by generator and reason
                service.refused(error)
                return self._answer(400, {"error": error.lines[0], "reason": error.reason})
            except Invalid as error:
                log.warning("controller: refused %s: %s", self.path[:80], error.lines[0])
                return self._answer(400, {"error": error.lines[0]})
            except (KeyError, TypeError, ValueError) as error:  # a field missing or of the wrong kind
                log.warning("controller: refused %s: %s", self.path[:80], error)
                return self._answer(400, {"error": f"malformed request: {str(error)[:200]}"})
            self._answer(200, answer)

        def _answer(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")  # the client opens another for its next request
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per request would drown the run's log

    return Handler


class RequestFailed(RuntimeError):
    """A request the controller refused; ``reason``: why, when it refused a generator's answer (wire.Refused)."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class Client:
    """A process's way to the controller: JSON in, JSON out; a refused request raises RequestFailed. Each thread
    that posts keeps its own connection (the trainer's step, its weight server and its evaluation post at once)."""

    def __init__(self, address: str, timeout: float = POLL_S + 30) -> None:
        self.address, self.timeout = address.rstrip("/"), timeout
        self.host = address.split("://", 1)[-1].rsplit(":", 1)[0]
        parts = urllib.parse.urlsplit(self.address)
        self._origin, self._prefix = (parts.hostname or "localhost", parts.port), parts.path
        self._https = parts.scheme == "https"
        self._local = threading.local()

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        status, payload = self._exchange(path, json.dumps(body).encode())
        if status >= 400:
            said = _json_object(payload[:4096].decode(errors="replace"))
            line = str(said.get("error", payload[:300].decode(errors="replace")))[:300]
            raise RequestFailed(f"{path}: {status} {line}", str(said.get("reason", ""))[:20])
        answer = json.loads(payload)
        if not isinstance(answer, dict):
            raise RequestFailed(f"{path}: the controller answered {type(answer).__name__}, not an object")
        return answer

    def _exchange(self, path: str, data: bytes) -> tuple[int, bytes]:
        """One request over this thread's connection. A kept connection the controller closed while it was idle
        (IDLE_S) fails before any answer: it is opened again and the request sent once more, as HTTP clients do."""
        for attempt in (1, 2):
            connection: http.client.HTTPConnection | None = getattr(self._local, "connection", None)
            kept = connection is not None
            if connection is None:
                kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
                connection = self._local.connection = kind(*self._origin, timeout=self.timeout)
            try:
                connection.request("POST", self._prefix + path, body=data, headers={"Content-Type": "application/json"})
                response = connection.getresponse()
                payload = response.read()
            except (ConnectionResetError, BrokenPipeError):  # RemoteDisconnected is a ConnectionResetError
                self._drop(connection)
                if kept and attempt == 1:
                    continue
                raise
            except BaseException:
                self._drop(connection)
                raise
            if response.will_close:
                self._drop(connection)
            return response.status, payload
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _drop(self, connection: http.client.HTTPConnection) -> None:
        connection.close()
        self._local.connection = None


def _json_object(text: str) -> dict[str, Any]:
    """The controller's error body as an object; {} when it is not one (a proxy's page, a cut body)."""
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
