"""Heal transfers over the run's mutual TLS: the transport of every group of a run with a TLS identity.

torchft 0.2.0's ``HTTPTransport`` serves a group's whole state over plain HTTP to anyone, on every
interface: its server is built in ``__init__`` on ``("", 0)`` with an IPv6 dual-stack socket
(torchft/checkpointing/http_transport.py, ``HTTPTransport.__init__``; torchft/http.py,
``_IPv6HTTPServer``), with no hook for a context or an address. Across regions the pod ranges that
reach a run's pods hold every team's pods, and the address is no secret: the group's Manager hands it
to whoever calls ``CheckpointMetadata``. So a run with a TLS identity uses this transport instead,
through torchft's public ``CheckpointTransport`` (the Manager's ``checkpoint_transport=``):

* it serves the state on the pod's address only (``host``: the address it announces), on the first free
  port of contract.names.HEAL_TLS_PORTS (a rule can name them; torchft's takes any), over TLS 1.3
  with the run's member certificate, and completes a handshake only with a client certificate of the
  run's CA (trainer.distributed.mtls's contexts): a process without one, or with another run's, gets no byte;
* it announces ``https://host:port/checkpoint/`` and serves torchft's wire format (PyTorch's streaming
  save of the whole state at ``/checkpoint/<step>/full``, as ``HTTPTransport`` with ``num_chunks=0``);
* a healing group connects to the announced address, presents its member certificate and accepts only
  a server certificate of the run's CA for contract.names.MEMBER_TLS_NAME, then loads what it is sent
  with the weights-only unpickler, bounded (ft/heal_transport.py): a member is trusted with the run's
  weights, never with running code in its peers.

Handshakes run on each connection's own thread, under the transfer timeout, and at most
``MAX_CONNECTIONS`` connections are served at once: idle connections cannot hold the server.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import re
import socket
import socketserver
import ssl
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any, Generic, TypeVar

import torch
from torchft.checkpointing import CheckpointTransport

from contract.names import HEAL_TLS_PORTS, MEMBER_TLS_NAME
from trainer.distributed.listen import first_free
from trainer.distributed.mtls import Identity, client_context, server_context
from trainer.ft.heal_transport import HealRefused, load_weights_only

log = logging.getLogger(__name__)

T = TypeVar("T")
MAX_CONNECTIONS = 16  # healing peers at once: a few per quorum change; the rest is refused, not queued
_PATH = re.compile(r"/checkpoint/([0-9]{1,18})/full")
# What this transport announces (and nothing else is fetched): the source's own Manager hands it over.
_SOURCE = re.compile(r"https://([A-Za-z0-9.\-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]):([0-9]{1,5})/checkpoint/")


def source(metadata: str) -> tuple[str, int]:
    """(host, port) of an announced ``https://host:port/checkpoint/`` (or HealRefused)."""
    found = _SOURCE.fullmatch(metadata)
    if found is None:
        raise HealRefused(f"heal source announced {metadata[:120]!r}, not https://host:port/checkpoint/")
    return found.group(1).strip("[]"), int(found.group(2))


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class _Shelf(Generic[T]):
    """The state on offer: one step's, from ``put`` until ``close``; readers finish before ``close`` returns."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.changed = threading.Condition()
        self.step, self.open, self.readers = -1, False, 0
        self.state: T | None = None

    def put(self, step: int, state: T) -> None:
        with self.changed:
            self.step, self.state, self.open = step, state, True
            self.changed.notify_all()

    def close(self) -> None:
        with self.changed:
            self.open = False
            if not self.changed.wait_for(lambda: self.readers == 0, self.timeout_s):
                # A slow reader keeps its own reference to what it was handed (the trainer's snapshot,
                # ft.Torchft.register_state): nothing the trainer mutates, so the step goes on.
                log.warning("heal: %d peer(s) still reading after %.0fs", self.readers, self.timeout_s)
            self.state = None  # the host copy is not kept until the next offer

    @contextlib.contextmanager
    def reading(self, step: int) -> Iterator[Any]:
        """The state at ``step`` (None if another is on offer); waits for an offer, as torchft's server does."""
        with self.changed:
            self.changed.wait_for(lambda: self.open, self.timeout_s)  # a healer may ask before its source offers
            if not self.open or step != self.step:
                state = None
            else:
                state, self.readers = self.state, self.readers + 1
        try:
            yield state
        finally:
            if state is not None:
                with self.changed:
                    self.readers -= 1
                    self.changed.notify_all()


class _Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    """Accepts on ``address`` only; each connection's TLS handshake and request run on its own thread."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], context: ssl.SSLContext, shelf: _Shelf[Any], timeout_s: float) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.context, self.shelf, self.timeout_s = context, shelf, timeout_s
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.served = self.refused = 0
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.refused += 1
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(self.timeout_s)  # the handshake and every read and write after it
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as error:
            self.refused += 1
            log.warning("heal: refused %s: %s", client_address, getattr(error, "reason", None) or error)
            return
        with tls:
            _Handler(tls, client_address, self)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        from torch.distributed._serialization import _streaming_save  # torchft's format (ft/heal_transport.py)

        found = _PATH.fullmatch(self.path)
        if found is None:
            self.send_error(404, "only /checkpoint/<step>/full")
            return
        with self.server.shelf.reading(int(found.group(1))) as state:
            if state is None:
                self.send_error(409, f"not serving step {found.group(1)}")
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.end_headers()
            _streaming_save(state, self.wfile)
            self.server.served += 1

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("heal: %s " + format, self.client_address, *args)


class _MemberConnection(http.client.HTTPConnection):
    """HTTP over the run's TLS to a peer's address, verifying the peer as a member (MEMBER_TLS_NAME), not by its IP."""

    def __init__(self, host: str, port: int, timeout_s: float, context: ssl.SSLContext) -> None:
        super().__init__(host, port, timeout=timeout_s)
        self.context = context

    def connect(self) -> None:
        raw = socket.create_connection((self.host, self.port), self.timeout)
        try:
            self.sock = self.context.wrap_socket(raw, server_hostname=MEMBER_TLS_NAME)
        except ssl.SSLError as error:
            raw.close()
            raise HealRefused(
                f"heal source {self.host}:{self.port} is not a member of this run ({error.reason or error})"
            ) from None


def listen(host: str, ports: Sequence[int], make: Callable[[tuple[str, int]], _Server]) -> _Server:
    """The server on the first free of ``ports`` (the rule's range); past them, a free one, which a rule naming
    the range does not admit (a machine with more ranks than a GPU node: the local launcher, tests)."""
    if (server := first_free(ports, lambda port: make((host, port)))) is not None:
        return server
    log.warning("heal: ports %d-%d of %s are taken; serving on a free port", ports[0], ports[-1], host)
    return make((host, 0))


class TlsHealTransport(CheckpointTransport[T]):  # type: ignore[misc]  # torchft ships no type hints
    """Serves this group's state on ``host`` to the run's members only; fetches a peer's as a member."""

    def __init__(
        self,
        identity: Identity,
        host: str,
        timeout: timedelta,
        limit: Callable[[], int],
        ports: Sequence[int] = HEAL_TLS_PORTS,
    ) -> None:
        self.host, self.limit, self.timeout_s = host, limit, timeout.total_seconds()
        self.client = client_context(identity)
        self.shelf: _Shelf[T] = _Shelf(self.timeout_s)
        context = server_context(identity)
        self.server = listen(host, ports, lambda address: _Server(address, context, self.shelf, self.timeout_s))
        self.thread = threading.Thread(target=self.server.serve_forever, name="heal-tls", daemon=True)
        self.thread.start()

    @property
    def served(self) -> int:
        """States sent whole to a member."""
        return self.server.served

    @property
    def refused(self) -> int:
        """Connections dropped at the handshake (no or a foreign certificate) or over MAX_CONNECTIONS."""
        return self.server.refused

    def metadata(self) -> str:
        return f"https://{url_host(self.host)}:{self.server.server_address[1]}/checkpoint/"

    def send_checkpoint(self, dst_ranks: list[int], step: int, state_dict: T, timeout: timedelta) -> None:
        from torch.utils._pytree import tree_map_only

        # On the host, as torchft's HTTPTransport does: GPU tensors are copied once, not per reader.
        self.shelf.put(step, tree_map_only(torch.Tensor, lambda t: t.cpu(), state_dict))

    def disallow_checkpoint(self) -> None:
        self.shelf.close()

    def recv_checkpoint(self, src_rank: int, metadata: str, step: int, timeout: timedelta) -> T:
        host, port = source(metadata)
        connection = _MemberConnection(host, port, timeout.total_seconds(), self.client)
        try:
            connection.request("GET", f"/checkpoint/{step}/full")
            response = connection.getresponse()
            if response.status != 200:
                raise HealRefused(f"heal source {host}:{port} answered {response.status} for step {step}")
            state: T = load_weights_only(response, self.limit())  # type: ignore[assignment]
            return state
        finally:
            connection.close()

    def shutdown(self, wait: bool = True) -> None:
        def stop() -> None:
            self.server.shutdown()  # returns once serve_forever has
            self.server.server_close()

        self.shelf.close()
        if wait:
            stop()
        else:  # torchft's Manager.shutdown(wait=False): do not block the caller on the serving thread
            threading.Thread(target=stop, name="heal-tls-stop", daemon=True).start()
