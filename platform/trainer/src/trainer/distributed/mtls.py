"""Who may join a run: the Lighthouse is reached only over mutual TLS with the run's certificates.

torchft's Lighthouse has no authentication, and across regions the pod ranges that may reach it are
shared by every team. So the Lighthouse listens on its pod's loopback only, and a TLS-terminating
proxy in the same pod (``python -m trainer.distributed.mtls``, gkr's sidecar) takes the Service port: it
completes a TLS 1.3 handshake only with a client certificate issued by the run's own CA. Each
replica group's Manager reaches the Lighthouse through a local proxy (``Proxy.originating``, in
the trainer) that presents the run's client certificate and accepts only a server certificate of
the same CA for the Lighthouse's name. A replica without the run's certificate, or with another
run's, is refused at the handshake and never reaches the quorum.

TLS is Python's ``ssl`` (OpenSSL); the proxies only move bytes (torchft's gRPC) between a TLS and a
plain socket, with asyncio's TLS streams (one thread, no concurrent use of one TLS connection).
The identity is a folder as Kubernetes mounts a ``kubernetes.io/tls`` Secret plus the CA:
``ca.crt``, ``tls.crt``, ``tls.key`` (the names cert-manager also uses).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import ssl
import sys
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from contract.names import LIGHTHOUSE_TLS_NAME

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_S = 10.0
CHUNK = 1 << 16


class MtlsError(Exception):
    """One line: which identity or address is unusable, and how to fix it."""


@dataclass(frozen=True)
class Identity:
    """The run's CA certificate, and this party's certificate and key (PEM files)."""

    ca: Path
    cert: Path
    key: Path

    @classmethod
    def folder(cls, folder: str | Path) -> Identity:
        path = Path(folder)
        found = cls(path / "ca.crt", path / "tls.crt", path / "tls.key")
        missing = [p.name for p in (found.ca, found.cert, found.key) if not p.is_file()]
        if missing:
            raise MtlsError(
                f"{path}: no {', '.join(missing)}; mount the run's TLS Secret there (gkr renders it for runs across regions)"
            )
        return found


def _context(purpose: ssl.Purpose, identity: Identity) -> ssl.SSLContext:
    side = ssl.PROTOCOL_TLS_SERVER if purpose is ssl.Purpose.CLIENT_AUTH else ssl.PROTOCOL_TLS_CLIENT
    context = ssl.SSLContext(side)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.verify_mode = ssl.CERT_REQUIRED  # both ways: the client's certificate is the membership
    try:
        context.load_verify_locations(cafile=str(identity.ca))  # the run's CA only, never the system's
        context.load_cert_chain(str(identity.cert), str(identity.key))
    except (ssl.SSLError, OSError) as error:
        raise MtlsError(
            f"{identity.cert.parent}: unusable TLS identity ({error}); mount the run's TLS Secret"
        ) from None
    return context


def server_context(identity: Identity) -> ssl.SSLContext:
    """The serving side (the Lighthouse's proxy, a group's heal server): a client certificate of the run's CA is required."""
    return _context(ssl.Purpose.CLIENT_AUTH, identity)


def client_context(identity: Identity) -> ssl.SSLContext:
    """A member's side: presents the run's client certificate; the server must hold the run's certificate for the
    name the caller connects with (LIGHTHOUSE_TLS_NAME for the Lighthouse, MEMBER_TLS_NAME for a peer's heal server)."""
    return _context(ssl.Purpose.SERVER_AUTH, identity)  # check_hostname stays on


def host_port(address: str) -> tuple[str, int]:
    """(host, port) of ``http://host:port`` (torchft's Lighthouse address form)."""
    parts = urlsplit(address if "://" in address else f"//{address}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise MtlsError(f"{address[:120]!r} is not host:port; set ft.lighthouse=http://host:port")
    return parts.hostname, port


Opener = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


class Proxy:
    """Accepts on ``listen`` (TLS with ``accept_tls``) and relays each connection to ``upstream()``; a daemon thread."""

    def __init__(self, listen: tuple[str, int], upstream: Opener, accept_tls: ssl.SSLContext | None) -> None:
        self.refused = 0  # connections dropped at the handshake or before the upstream answered
        self._loop = asyncio.new_event_loop()
        self._upstream = upstream
        self._thread = threading.Thread(target=self._loop.run_forever, name="mtls-proxy", daemon=True)
        if accept_tls is not None:
            accept_tls.sslobject_class = self._counted()  # the documented hook for SSLContext.wrap_bio's objects
        self._thread.start()
        started: Future[asyncio.Server] = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(
                self._relay, *listen, ssl=accept_tls, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if accept_tls else None
            ),
            self._loop,
        )
        self._server = started.result(timeout=HANDSHAKE_TIMEOUT_S)
        self.port: int = self._server.sockets[0].getsockname()[1]

    @classmethod
    def terminating(cls, listen: tuple[str, int], upstream: tuple[str, int], identity: Identity) -> Proxy:
        """The Lighthouse's: TLS with a run client certificate in, plain to the Lighthouse on loopback."""
        return cls(listen, lambda: asyncio.open_connection(*upstream), server_context(identity))

    @classmethod
    def originating(cls, lighthouse: str, identity: Identity) -> Proxy:
        """A Manager's: plain in on 127.0.0.1 (a free port), TLS with the run's client certificate out."""
        host, port = host_port(lighthouse)
        context = client_context(identity)

        def opener() -> Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
            return asyncio.open_connection(
                host, port, ssl=context, server_hostname=LIGHTHOUSE_TLS_NAME, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S
            )

        return cls(("127.0.0.1", 0), opener, None)

    def address(self) -> str:
        """What a Manager is given as its Lighthouse (only meaningful for an originating proxy)."""
        return f"http://127.0.0.1:{self.port}"

    def _counted(self) -> type[ssl.SSLObject]:
        """TLS objects that count the handshakes this proxy refuses (asyncio drops them silently)."""
        proxy = self

        class Counted(ssl.SSLObject):
            def do_handshake(self) -> None:
                try:
                    super().do_handshake()
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    raise  # not a refusal: the handshake waits for more bytes
                except ssl.SSLError as error:
                    proxy.refused += 1
                    log.warning("mtls: refused a handshake: %s", error.reason or error)
                    raise

        return Counted

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.wait_for(self._upstream(), HANDSHAKE_TIMEOUT_S)
        except (OSError, ssl.SSLError, TimeoutError) as error:
            self.refused += 1
            peer = writer.get_extra_info("peername")
            log.warning(
                "mtls: refused %s: %s", peer, str(error).splitlines()[0][:200] if str(error) else type(error).__name__
            )
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            # Open connections too: nothing is left running on a stopped loop. Cancelled again until done: on
            # Python 3.11 asyncio.wait_for returns its result instead of raising when the cancellation and the
            # inner connect complete together (CPython gh-86296, fixed in 3.12), so a relay that was opening its
            # upstream as the proxy closed goes on piping a live connection after its first cancel.
            pending = {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}
            while pending:
                for task in pending:
                    task.cancel()
                _, pending = await asyncio.wait(pending, timeout=0.5)

        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=HANDSHAKE_TIMEOUT_S)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=HANDSHAKE_TIMEOUT_S)
            self._loop.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until either side ends, then close this direction's writer (the other pipe then ends too)."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (OSError, ssl.SSLError):
        pass  # a peer gone mid-stream: gRPC reconnects
    finally:
        writer.close()


def start(argv: list[str] | None = None) -> Proxy:
    """The sidecar's proxy from its command line, listening; MtlsError (one line) for an unusable identity or address."""
    parser = argparse.ArgumentParser(prog="python -m trainer.distributed.mtls", description=__doc__.splitlines()[0])
    # The pod's IP (gkr renders $(POD_IP), the downward API's status.podIP): the Service's traffic and the kubelet's
    # probe arrive there, and nothing else of the pod's (its other interfaces) is served.
    parser.add_argument("--listen-host", required=True, help="the address to listen on: the pod's IP")
    parser.add_argument("--listen-port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="the Lighthouse on loopback, host:port")
    parser.add_argument("--identity", required=True, help="folder with ca.crt, tls.crt, tls.key")
    args = parser.parse_args(argv)
    identity = Identity.folder(args.identity)
    try:
        return Proxy.terminating((args.listen_host, args.listen_port), host_port(args.upstream), identity)
    except OSError as error:
        raise MtlsError(
            f"--listen-host {args.listen_host}: cannot listen ({error.strerror}); give the pod's IP"
        ) from None


def main(argv: list[str] | None = None) -> int:
    """The Lighthouse pod's sidecar: ``python -m trainer.distributed.mtls --listen-host IP --listen-port P --upstream
    127.0.0.1:Q --identity DIR``."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    try:
        proxy = start(argv)
    except MtlsError as error:
        print(f"trainer.distributed.mtls: {error}", file=sys.stderr)
        return 2
    log.info("mtls: lighthouse on :%d, run members only", proxy.port)
    threading.Event().wait()  # until the pod stops
    return 0


if __name__ == "__main__":
    sys.exit(main())
