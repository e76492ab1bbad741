"""The process group between regions over the run's mutual TLS (trainer/distributed/tls_pg.py, distributed/tls_ring.py).

The honest groups are the trainer's own fault tolerance (trainer.ft.manager with ft.lighthouse_tls, as gkr sets for a
run across regions) or the ring itself; the attackers are torchft's plain ProcessGroupGloo (what any process
that reaches the quorum's store address can run), a ring member with another run's certificate, and a client
with no certificate at all. Addresses are 127.0.0.x: one machine stands in for the pods.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from trainer.distributed.mtls import Identity
from trainer.distributed.tls_pg import TlsRingProcessGroup
from trainer.distributed.tls_ring import MAX_PENDING_PER_PEER, RENDEZVOUS_OFFSET, RingServer, pair_ports

from contract.names import ADVERTISE_HOST_ENV
from gkr.run_tls import mint
from tests.trainer.test_lighthouse_heal import honest_group
from tests.trainer.test_lighthouse_mtls import guarded_lighthouse, identity_folder
from tests.waiting import until

TIMEOUT = timedelta(seconds=5)
HOST = "127.0.0.1"


def ring(identity: Path, sock: socket.socket | None = None, timeout: timedelta = TIMEOUT) -> TlsRingProcessGroup:
    return TlsRingProcessGroup(RingServer(sock or socket.create_server((HOST, 0)), Identity.folder(identity)), timeout)


def together(*calls: Callable[[], Any]) -> list[Any]:
    """Run ``calls`` at once (as the groups of a quorum do); each result, or the exception it raised."""
    results: list[Any] = [None] * len(calls)

    def one(i: int) -> None:
        try:
            results[i] = calls[i]()
        except Exception as error:
            results[i] = error

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a collective hung"
    return results


def reduce(pg: Any, tensor: torch.Tensor, op: Any = dist.ReduceOp.SUM) -> torch.Tensor:
    opts = dist.AllreduceOptions()
    opts.reduceOp = op
    pg.allreduce([tensor], opts).wait()
    return tensor


@pytest.fixture
def member(tmp_path: Path) -> Path:
    return identity_folder(tmp_path / "ring-member", mint("victim"), "member")


@contextmanager
def rings(member: Path, count: int, timeout: timedelta = TIMEOUT) -> Iterator[tuple[list[TlsRingProcessGroup], str]]:
    """``count`` ring members configured as one quorum; rank 0's listener hosts the rendezvous."""
    store, first = pair_ports(HOST)
    pgs = [ring(member, first, timeout)] + [ring(member, timeout=timeout) for _ in range(count - 1)]
    address = f"{HOST}:{store.getsockname()[1]}/torchft/1/0"
    try:
        assert (
            together(*[lambda i=i: pgs[i].configure(address, "victim", i, count) for i in range(count)])
            == [None] * count
        )
        yield pgs, address
    finally:
        for pg in pgs:
            pg.shutdown()
        store.close()


def test_the_ring_sums_and_averages_as_torchft_and_the_trainer_ask(member: Path) -> None:
    with rings(member, 3) as (pgs, _):
        summed = together(*[lambda i=i: reduce(pgs[i], torch.arange(7.0) * (i + 1)) for i in range(3)])
        averaged = together(
            *[lambda i=i: reduce(pgs[i], torch.full((2, 3), float(i)), dist.ReduceOp.AVG) for i in range(3)]
        )
        wide = together(*[lambda i=i: reduce(pgs[i], torch.ones(5, dtype=torch.bfloat16) * i) for i in range(3)])
        tiny = together(*[lambda i=i: reduce(pgs[i], torch.tensor([float(i)])) for i in range(3)])  # 1 < 3 chunks
    for got in summed:
        assert torch.equal(got, torch.arange(7.0) * 6)
    for got in averaged:
        assert torch.equal(got, torch.ones(2, 3))
    for got in wide:
        assert got.dtype == torch.bfloat16
        assert torch.equal(got, torch.full((5,), 3.0, dtype=torch.bfloat16))
    assert all(torch.equal(t, torch.tensor([3.0])) for t in tiny)
    assert [pg.size() for pg in pgs] == [3, 3, 3]


def exchange(tls: ssl.SSLSocket, line: bytes) -> bytes:
    tls.sendall(line)
    return tls.recv(64)


def test_the_rendezvous_refuses_clients_without_the_run_s_certificate(member: Path) -> None:
    """Neither a plain client nor a TLS client without a certificate reads or writes the ring's rendezvous."""
    store, sock = pair_ports(HOST)
    server = RingServer(sock, Identity.folder(member))
    join = {"op": "join", "key": "/torchft/1/0", "rank": 1, "world": 2, "timeout_ms": 2000, "host": HOST, "port": 1}
    line = json.dumps(join).encode() + b"\n"
    try:
        with socket.create_connection((HOST, server.port), timeout=5) as plain:
            plain.sendall(line)
            try:
                answer = plain.recv(4096)
            except ConnectionResetError:
                answer = b""
            assert b"addresses" not in answer  # closed at the handshake, nothing read back
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # no certificate of its own
        # TLS 1.3: the server checks the client's certificate after the client's side of the handshake, then sends
        # an alert (certificate required) and closes: the request fails one way or the other.
        with (
            socket.create_connection((HOST, server.port), timeout=5) as raw,
            context.wrap_socket(raw) as tls,
            pytest.raises(ssl.SSLError),
        ):
            exchange(tls, line)
        assert server.tables == {}  # nothing was written
        # The server counts a refusal on the connection's thread, which may be after the client has read the
        # alert (TLS 1.3: the client's side of the handshake completes first).
        until(lambda: server.refused >= 2, 10, "counted both refusals", every_s=0.01)
        assert server.refused == 2
    finally:
        server.close()
        store.close()


def test_a_flood_of_idle_connections_from_one_address_costs_no_thread_and_the_ring_still_forms(member: Path) -> None:
    """Connections that never handshake, from another pod's address (127.0.0.5): past MAX_PENDING_PER_PEER each is
    closed at once instead of holding a thread for the handshake's 10 s; the members' rendezvous goes on."""
    with rings(member, 2) as (pgs, address):
        server = pgs[0].ring.server
        idle = []
        for _ in range(MAX_PENDING_PER_PEER + 4):
            sock = socket.socket()
            sock.bind(("127.0.0.5", 0))
            sock.connect((HOST, server.port))
            idle.append(sock)
        try:
            for sock in idle[MAX_PENDING_PER_PEER:]:
                sock.settimeout(5)  # half the handshake timeout: only a connection closed at once reads b"" in time
                assert sock.recv(1) == b""
            again = address.replace("/1/0", "/2/0")
            assert together(*[lambda i=i: pgs[i].configure(again, "victim", i, 2) for i in range(2)]) == [None, None]
            assert torch.equal(
                together(lambda: reduce(pgs[0], torch.ones(3)), lambda: reduce(pgs[1], torch.ones(3)))[0],
                torch.full((3,), 2.0),
            )
        finally:
            for sock in idle:
                sock.close()
        assert server.refused >= 4


def test_a_group_s_store_and_ring_listen_on_its_advertised_address_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pod's IP (here 127.0.0.2) only: nothing of the group's answers on another interface (127.0.0.9).

    Not 127.0.0.1: other tests' groups leave stores listening there on the same port range (torchft's Manager holds
    them), which would answer. A socket on 127.0.0.2 or 127.0.0.9 alone can share a port number with them; one on
    every interface could not have been bound beside them, so a refusal on 127.0.0.9 shows ours is not."""
    monkeypatch.setenv(ADVERTISE_HOST_ENV, "127.0.0.2")
    with guarded_lighthouse(tmp_path, min_replicas=1) as (lighthouse, _, member):
        ft = honest_group(lighthouse, tmp_path / "honest", f"ft.lighthouse_tls={member}")
        try:
            assert isinstance(ft.pg, TlsRingProcessGroup)
            for port in (ft.store.port, ft.store.port + RENDEZVOUS_OFFSET):
                socket.create_connection(("127.0.0.2", port), timeout=5).close()
                with pytest.raises(ConnectionRefusedError):
                    socket.create_connection(("127.0.0.9", port), timeout=5)
        finally:
            ft.shutdown()
