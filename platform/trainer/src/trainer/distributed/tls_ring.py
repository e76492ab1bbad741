"""The sockets of the cross-region ring: one TLS 1.3 listener per group, its rendezvous and its links (no torch).

Each replica group's process listens on its pod's IP only (``RingServer``), with the run's certificate, and
accepts only clients that present a certificate of the run's CA (trainer/distributed/mtls.py's contexts); it dials its
peers the same way and checks that they hold the run's member certificate (``names.MEMBER_TLS_NAME``). After
the handshake a client sends one header line (JSON, bounded) saying what it wants:

* ``join``: register (rendezvous key, rank, world size, ring address) and receive, once every rank of that
  key has joined, the ring addresses of all of them. The listener of the group that hosts the quorum's store
  serves this: torchft hands each group the store's ``host:port``, and the ring's rendezvous is at
  ``host:port + RENDEZVOUS_OFFSET`` (ft/manager.py binds the two as a pair, ``pair_ports``, the ring's port in
  ``names.RING_TLS_PORTS``). The plain store itself is never read by the ring: its port needs no opening
  across regions.
* ``ring``: this connection carries the ring's data from the sender (rank r) to this process (rank r+1).

Every wait is bounded by the caller's timeout (torchft's ``ft.timeout_s``): a peer that never joins, never
connects or stops sending fails the collective instead of hanging it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from contract.names import MEMBER_TLS_NAME, RING_TLS_PORTS
from trainer.distributed.listen import bound_socket, first_free
from trainer.distributed.mtls import HANDSHAKE_TIMEOUT_S, Identity, client_context, server_context

log = logging.getLogger(__name__)

# The ring's rendezvous listens above the quorum's store, at store port + RENDEZVOUS_OFFSET: every ring port is in
# RING_TLS_PORTS (what the cross-region network rule admits), every store port below it.
RENDEZVOUS_OFFSET = len(RING_TLS_PORTS)
MAX_HEADER = 4096  # bytes of one header line: a key, two ints and an address
MAX_WORLD = 4096  # replica groups in one quorum (far above any fleet's)
KEPT_KEYS = 64  # rendezvous tables kept (each quorum's, per group rank); older ones are dropped
# Connections of one address still in their handshake: a member has at most a few (its joins and ring links); more
# from one address are dropped at once, so a flood of idle connections costs no thread for its 10 s each.
MAX_PENDING_PER_PEER = 8


class RingError(Exception):
    """One line: which peer or key failed, and why."""


def ring_socket(host: str, ports: range = RING_TLS_PORTS) -> socket.socket:
    """A listening socket on ``host`` only, at the first free port of ``ports``."""
    if (sock := first_free(ports, lambda port: bound_socket(host, port))) is None:
        raise RingError(f"{host}: every ring port {ports.start}-{ports.stop - 1} is taken; fewer groups per pod")
    return sock


def pair_ports(host: str, ports: range = RING_TLS_PORTS) -> tuple[socket.socket, socket.socket]:
    """(store, ring): listening sockets on ``host`` only, the ring's in ``ports``, the store's RENDEZVOUS_OFFSET below."""

    def pair(port: int) -> tuple[socket.socket, socket.socket]:
        ring = bound_socket(host, port)
        try:
            return bound_socket(host, port - RENDEZVOUS_OFFSET), ring
        except OSError:
            ring.close()
            raise

    if (sockets := first_free(ports, pair)) is None:
        raise RingError(f"{host}: no free pair of store and ring ports below {ports.stop}; fewer groups per pod")
    return sockets


def store_endpoint(store_addr: str) -> tuple[str, int, str]:
    """(host, rendezvous port, key) from torchft's ``host:port/prefix`` (IPv6 hosts in brackets or bare)."""
    address, _, key = store_addr.partition("/")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65535:
        raise RingError(f"{store_addr[:120]!r} is not host:port/prefix (torchft's store address)")
    return host.strip("[]"), int(port) + RENDEZVOUS_OFFSET, key


def send_header(sock: ssl.SSLSocket, header: dict[str, object]) -> None:
    line = json.dumps(header, separators=(",", ":")).encode() + b"\n"
    if len(line) > MAX_HEADER:
        raise RingError(f"header of {len(line)} bytes is over {MAX_HEADER}")
    sock.sendall(line)


def read_header(sock: ssl.SSLSocket) -> dict[str, object]:
    """One JSON object on one line, at most MAX_HEADER bytes; anything else is refused."""
    data = bytearray()
    while not data.endswith(b"\n"):
        if len(data) >= MAX_HEADER:
            raise RingError(f"header longer than {MAX_HEADER} bytes")
        chunk = sock.recv(1)  # one byte at a time: what follows the line is the ring's data
        if not chunk:
            raise RingError("peer closed the connection before its header")
        data += chunk
    try:
        header = json.loads(data)
    except ValueError:
        raise RingError("header is not JSON") from None
    if not isinstance(header, dict):
        raise RingError("header is not an object")
    return header


def _int(header: dict[str, object], name: str, low: int, high: int) -> int:
    value = header.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise RingError(f"header field {name}: {str(value)[:40]!r} is not an integer in [{low}, {high}]")
    return value


def _text(header: dict[str, object], name: str, limit: int = 512) -> str:
    value = header.get(name)
    if not isinstance(value, str) or not value or len(value) > limit or any(ord(c) < 32 for c in value):
        raise RingError(f"header field {name}: not a short printable string")
    return value


@dataclass
class _Table:
    """One rendezvous: the ring address of each rank that joined, for ``world`` ranks."""

    world: int
    addresses: dict[int, tuple[str, int]] = field(default_factory=dict)


class RingServer:
    """The TLS listener of one group's process: rendezvous for quorums it hosts, incoming ring links.

    ``refused`` counts connections dropped at the handshake or for a malformed header.
    """

    def __init__(self, sock: socket.socket, identity: Identity) -> None:
        self.sock, self.identity = sock, identity
        self.host, self.port = sock.getsockname()[:2]
        self.accept_tls, self.dial_tls = server_context(identity), client_context(identity)
        self.refused = 0
        self.cond = threading.Condition()
        self.tables: dict[str, _Table] = {}
        self.links: dict[tuple[str, int], ssl.SSLSocket] = {}  # (key, sender rank): an accepted ring link
        self.pending: dict[str, int] = {}  # connections per peer address not yet authenticated
        self.closed = False
        threading.Thread(target=self.accept_loop, name="tls-ring-accept", daemon=True).start()

    def accept_loop(self) -> None:
        while not self.closed:
            try:
                raw, peer = self.sock.accept()
            except OSError:
                return  # closed
            with self.cond:
                waiting = self.pending.get(peer[0], 0)
                if waiting < MAX_PENDING_PER_PEER:
                    self.pending[peer[0]] = waiting + 1
            if waiting >= MAX_PENDING_PER_PEER:  # a flood from one address: its connections cost no thread
                self.refuse(raw, peer, RingError(f"{waiting} handshakes of this address already pending"))
                continue
            threading.Thread(target=self.serve, args=(raw, peer), name="tls-ring-peer", daemon=True).start()

    def serve(self, raw: socket.socket, peer: tuple[str, int]) -> None:
        try:
            raw.settimeout(HANDSHAKE_TIMEOUT_S)
            conn = self.accept_tls.wrap_socket(raw, server_side=True)
            header = read_header(conn)
        except (OSError, ssl.SSLError, RingError) as error:
            self.refuse(raw, peer, error)
            return
        finally:
            with self.cond:  # authenticated, or dropped: no longer pending
                self.pending[peer[0]] -= 1
                if not self.pending[peer[0]]:
                    del self.pending[peer[0]]
        try:
            self.dispatch(conn, header)
        except (OSError, ssl.SSLError, RingError) as error:
            self.refuse(conn, peer, error)

    def dispatch(self, conn: ssl.SSLSocket, header: dict[str, object]) -> None:
        op = _text(header, "op", 8)
        if op == "join":
            self.join(conn, header)
        elif op == "ring":
            key, rank = _text(header, "key"), _int(header, "rank", 0, MAX_WORLD)
            with self.cond:
                old = self.links.pop((key, rank), None)
                self.links[(key, rank)] = conn
                self.cond.notify_all()
            if old is not None:
                old.close()
        else:
            raise RingError(f"unknown op {op!r}")

    def refuse(self, sock: socket.socket, peer: tuple[str, int], error: Exception) -> None:
        self.refused += 1
        log.warning("tls ring: refused %s: %s", peer, str(error).splitlines()[0][:200] if str(error) else error)
        sock.close()

    def join(self, conn: ssl.SSLSocket, header: dict[str, object]) -> None:
        """Record the joining rank, answer with every rank's address once all have joined (or drop on timeout)."""
        key, world = _text(header, "key"), _int(header, "world", 2, MAX_WORLD)
        rank, timeout = _int(header, "rank", 0, world - 1), _int(header, "timeout_ms", 1, 3_600_000) / 1000
        address = (_text(header, "host", 255), _int(header, "port", 1, 65535))
        with self.cond:
            table = self.tables.setdefault(key, _Table(world))
            if table.world != world:
                raise RingError(f"rendezvous {key[:80]!r}: world {world} joins one of {table.world}")
            table.addresses[rank] = address
            while len(self.tables) > KEPT_KEYS:
                self.tables.pop(next(iter(self.tables)))
            self.cond.notify_all()
            complete = self.cond.wait_for(lambda: len(table.addresses) == table.world or self.closed, timeout)
        if complete and not self.closed:
            conn.settimeout(timeout)
            send_header(conn, {"addresses": [list(table.addresses[r]) for r in range(world)]})
        conn.close()

    def wait_link(self, key: str, rank: int, deadline: float) -> ssl.SSLSocket:
        """The ring link that rank ``rank`` opened to this process for ``key``, once it has arrived."""
        with self.cond:
            arrived = self.cond.wait_for(
                lambda: (key, rank) in self.links or self.closed, max(0.0, deadline - time.monotonic())
            )
            if not arrived or self.closed:
                raise RingError(f"rendezvous {key[:80]!r}: rank {rank} never opened its ring link")
            return self.links.pop((key, rank))

    def dial(self, address: tuple[str, int], header: dict[str, object], timeout: float) -> ssl.SSLSocket:
        """A TLS connection to a peer of the run (its member certificate), with ``header`` sent."""
        raw = socket.create_connection(address, timeout=min(timeout, HANDSHAKE_TIMEOUT_S))
        try:
            conn = self.dial_tls.wrap_socket(raw, server_hostname=MEMBER_TLS_NAME)
        except (OSError, ssl.SSLError):
            raw.close()
            raise
        conn.settimeout(timeout)
        send_header(conn, header)
        return conn

    def forget(self, keep: Callable[[str], bool]) -> None:
        """Close ring links not yet taken whose key ``keep`` rejects (those of a past quorum)."""
        with self.cond:
            for link_key in [k for k in self.links if not keep(k[0])]:
                self.links.pop(link_key).close()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            for conn in self.links.values():
                conn.close()
            self.links.clear()
            self.cond.notify_all()
        with contextlib.suppress(OSError):  # never listened, or already shut
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept(): close() alone leaves it listening
        self.sock.close()


def rendezvous(
    server: RingServer, store_addr: str, rank: int, world: int, timeout: float
) -> tuple[str, list[tuple[str, int]]]:
    """(key, every rank's ring address) for this quorum, from the listener at the store's port + RENDEZVOUS_OFFSET."""
    host, port, key = store_endpoint(store_addr)
    header = {"op": "join", "key": key, "rank": rank, "world": world, "timeout_ms": int(timeout * 1000)}
    header |= {"host": server.host, "port": server.port}
    try:
        conn = server.dial((host, port), header, timeout)
        try:
            answer = read_header(conn)
        finally:
            conn.close()
    except (OSError, ssl.SSLError, RingError) as error:
        raise RingError(f"rendezvous at {host}:{port} for {key[:80]!r}: {error}") from None
    found = answer.get("addresses")
    if not isinstance(found, list) or len(found) != world:
        raise RingError(f"rendezvous at {host}:{port} for {key[:80]!r}: no complete answer")
    return key, [(str(a[0]), int(a[1])) for a in found]
