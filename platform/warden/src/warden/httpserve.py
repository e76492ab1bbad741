"""Warden's HTTP endpoints (health probes, metrics): one thread, a bounded set of connections, a deadline each.

http.server's ThreadingHTTPServer gave every connection a thread that waited for its request as long as
the client liked: 1,025 idle connections used up the process's file descriptors, /healthz went
unanswered and the kubelet restarted Warden for as long as they were held (issue 39). Here one thread
runs a `selectors` loop over the listening socket and the open connections, standard library only:

- every connection has `timeout_s` from its accept to the last byte of its answer; past it, it is
  closed whatever it sent. An idle or slow client (a byte now and then) holds one slot until then,
  never a thread;
- at most `max_connections` are open. A connection past the limit takes the slot of the oldest
  connection of the client address that holds the most, which is dropped; so does one the process
  has no file descriptor for (EMFILE). A flood from one address (a pod) thus evicts its own
  connections, never the probe's, which comes from another (the node). Each turn of the loop first
  serves the connections that are ready, then empties the listen backlog (up to ACCEPT_BATCH): a
  full backlog would drop the probe's SYN with the flood's, and the kernel resends it only after a
  second, the kubelet's whole timeout;
- a request head is at most MAX_HEAD bytes; GET only; one request per connection (`Connection:
  close`). The routes run in the loop, so they must be quick: a constant, the metrics' text.

What it cannot do: tell the kubelet from anyone else. Who may connect at all is the NetworkPolicy's
job (kustomize/base/warden/networkpolicy.yaml): the node, and for metrics Managed Prometheus.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import selectors
import socket
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus

from telemetry.exposition import CONTENT_TYPE

log = logging.getLogger(__package__)

Route = Callable[[], tuple[int, str]]
TIMEOUT_S = 5.0  # the kubelet's probe gives up after 1 s by default; a scrape of the metrics takes milliseconds
MAX_CONNECTIONS = 64  # far fewer than the file descriptors a process gets, far more than probes and scrapers need
BACKLOG, ACCEPT_BATCH = 1024, 1024  # the kernel caps the backlog at net.core.somaxconn (4096 on current kernels)
MAX_HEAD = 8192  # a request line and headers; the probe's and the scraper's are a few hundred bytes
OUT_OF_DESCRIPTORS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


@dataclass
class _Conn:
    sock: socket.socket
    deadline: float
    peer: str  # the client's address
    inbox: bytearray = field(default_factory=bytearray)
    outbox: bytes = b""


@dataclass
class Counts:
    """What the server did, for tests and logs: answers sent, connections cut at their deadline or for the limit."""

    answered: int = 0
    timed_out: int = 0
    evicted: int = 0


class HttpServer:
    def __init__(
        self,
        port: int,
        routes: dict[str, Route],
        timeout_s: float = TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
        host: str = "0.0.0.0",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if timeout_s <= 0 or max_connections < 2:
            raise ValueError("timeout_s must be > 0 and max_connections >= 2")
        self.routes, self.timeout_s, self.max_connections, self.clock = routes, timeout_s, max_connections, clock
        self.counts = Counts()
        self._listener = socket.create_server((host, port), backlog=BACKLOG)
        self._listener.setblocking(False)
        self.server_port: int = self._listener.getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()  # shutdown() from another thread ends the wait at once
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._open: OrderedDict[int, _Conn] = OrderedDict()  # by accept order: the first is the oldest
        self._peers: Counter[str] = Counter()  # open connections per client address
        self._stop = threading.Event()
        self._done = threading.Event()

    def serve_forever(self) -> None:
        try:
            while not self._stop.is_set():
                self._turn()
        finally:
            self._done.set()

    def shutdown(self) -> None:
        self._stop.set()
        self._wake_w.send(b"x")
        self._done.wait(10)

    def server_close(self) -> None:
        for fd in list(self._open):
            self._close(fd)
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()
        self._selector.close()

    def _turn(self) -> None:
        """One turn: wait until something is ready or the oldest deadline, serve the ready, accept, cut the late."""
        wait = max(0.0, next(iter(self._open.values())).deadline - self.clock()) if self._open else None
        ready = self._selector.select(wait)
        accept = False
        for key, events in ready:
            if key.fileobj is self._listener:
                accept = True
            elif key.fileobj is self._wake_r:
                self._wake_r.recv(64)
            elif key.fd in self._open:
                self._ready(key.fd, events)
        if accept:
            self._accept()
        self._expire()

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                sock, address = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as error:
                if error.errno not in OUT_OF_DESCRIPTORS:
                    raise
                if not self._open:  # descriptors used elsewhere in the process: nothing of ours to give back
                    self._stop.wait(0.05)
                    return
                self._evict()  # the oldest connection's descriptor, for the one waiting
                continue
            if len(self._open) >= self.max_connections:
                self._evict()
            sock.setblocking(False)
            peer = str(address[0])
            self._open[sock.fileno()] = _Conn(sock, self.clock() + self.timeout_s, peer)
            self._peers[peer] += 1
            self._selector.register(sock, selectors.EVENT_READ)

    def _evict(self) -> None:
        """Close the oldest connection of the address that holds the most: a flood evicts its own first."""
        crowding = max(self._peers, key=lambda peer: self._peers[peer])
        fd = next(fd for fd, conn in self._open.items() if conn.peer == crowding)
        self.counts.evicted += 1
        self._close(fd)

    def _expire(self) -> None:
        now = self.clock()
        while self._open:
            fd, conn = next(iter(self._open.items()))
            if conn.deadline > now:
                return  # every connection has the same timeout: the rest are younger
            self.counts.timed_out += 1
            self._close(fd)

    def _ready(self, fd: int, events: int) -> None:
        conn = self._open[fd]
        try:
            if events & selectors.EVENT_READ and not conn.outbox:
                self._read(fd, conn)
            elif events & selectors.EVENT_WRITE:
                self._write(fd, conn)
        except OSError:  # reset, broken pipe: the client is gone
            self._close(fd)

    def _read(self, fd: int, conn: _Conn) -> None:
        data = conn.sock.recv(MAX_HEAD)
        if not data:
            self._close(fd)
            return
        conn.inbox += data
        end = conn.inbox.find(b"\r\n\r\n")
        if end < 0:
            if len(conn.inbox) > MAX_HEAD:
                self._answer(fd, conn, 431, "request head too large\n")
            return
        line = bytes(conn.inbox[: conn.inbox.find(b"\r\n")]).decode("latin-1")
        self._answer(fd, conn, *self._route(line))

    def _route(self, line: str) -> tuple[int, str]:
        parts = line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return 400, "bad request\n"
        if parts[0] != "GET":
            return 405, "GET only\n"
        route = self.routes.get(parts[1].split("?", 1)[0])
        if route is None:
            return 404, "not found\n"
        try:
            return route()
        except Exception as error:  # a route's failure is one answer's, never the server's
            log.warning("%s: %s: %s", parts[1][:100], type(error).__name__, str(error)[:200])
            return 500, "internal error\n"

    def _answer(self, fd: int, conn: _Conn, code: int, text: str) -> None:
        body = text.encode()
        head = (
            f"HTTP/1.1 {code} {HTTPStatus(code).phrase}\r\nContent-Type: {CONTENT_TYPE}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        conn.outbox = head.encode() + body
        conn.inbox.clear()
        self.counts.answered += 1
        self._selector.modify(conn.sock, selectors.EVENT_WRITE)
        self._write(fd, conn)

    def _write(self, fd: int, conn: _Conn) -> None:
        try:
            sent = conn.sock.send(conn.outbox)
        except BlockingIOError:
            return
        conn.outbox = conn.outbox[sent:]
        if not conn.outbox:
            self._close(fd)

    def _close(self, fd: int) -> None:
        conn = self._open.pop(fd, None)
        if conn is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn.sock)
        conn.sock.close()
        self._peers[conn.peer] -= 1
        if self._peers[conn.peer] <= 0:
            del self._peers[conn.peer]


def serve_http(
    port: int,
    routes: dict[str, Route],
    timeout_s: float = TIMEOUT_S,
    max_connections: int = MAX_CONNECTIONS,
) -> HttpServer:
    """Serve `routes` on every interface (probes and Prometheus reach the pod IP), in a thread of its own."""
    server = HttpServer(port, routes, timeout_s, max_connections)
    threading.Thread(target=server.serve_forever, name=f"warden-http-{port}", daemon=True).start()
    return server
