"""Heal transfers of a run across regions go through the run's mutual TLS (issue 39, item 1).

The transport is the one the trainer picks for a run with a TLS identity (trainer.ft.manager.heal_transport);
the certificates are gkr's, minted per run. The attacker is any process that reaches the pod: it reads
the announced address (torchft's Manager hands it to anyone who asks, CheckpointMetadata) and fetches
the state there with whatever it has: plain HTTP, no certificate, or another run's certificate.
"""

from __future__ import annotations

import http.client
import inspect
import socket
import ssl
import threading
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import torch
from trainer.config import Config, compose
from trainer.distributed.mtls import Identity
from trainer.ft.heal_tls import TlsHealTransport
from trainer.ft.heal_transport import HealRefused
from trainer.ft.manager import heal_transport

from contract.names import ADVERTISE_HOST_ENV, HEAL_TLS_PORTS
from gkr.run_tls import mint
from tests.ports import free_ports
from tests.trainer.conftest import CONFIG, assert_same
from tests.trainer.test_lighthouse_heal import honest_group, steps
from tests.trainer.test_lighthouse_mtls import guarded_lighthouse, identity_folder
from tests.waiting import until

TIMEOUT = timedelta(seconds=10)
STATE = {"user": {"trainer": {"weight": torch.arange(6.0)}}, "torchft": {"step": 5, "batches_committed": 5}}


def run_config(member: Path) -> Config:
    """A run across regions as gkr starts it: the run's Lighthouse and the members' identity."""
    return compose(
        CONFIG,
        ["run.name=victim", "ft.lighthouse=http://127.0.0.1:29510", f"ft.lighthouse_tls={member}", "ft.timeout_s=10"],
    )


@pytest.fixture
def member(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The run's member identity; the pod's address is 127.0.0.1 (what the Ray launcher sets to the pod's IP)."""
    monkeypatch.setenv(ADVERTISE_HOST_ENV, "127.0.0.1")
    return identity_folder(tmp_path / "member", mint("victim"), "member")


@pytest.fixture
def serving(member: Path) -> Iterator[Any]:
    """A group's transport serving STATE at step 5, as torchft's Manager has it do for a healing peer."""
    transport = heal_transport(run_config(member), lambda: 1 << 20)
    transport.send_checkpoint([1], 5, STATE, TIMEOUT)
    try:
        yield transport
    finally:
        transport.shutdown(wait=True)


def fetch(metadata: str, step: int, identity: Path | None) -> bytes:
    """The attacker: GET the state at the announced address, over TLS with ``identity`` if it is https."""
    url = f"{metadata}{step}/full"
    if not url.startswith("https://"):
        with urllib.request.urlopen(url, timeout=10) as response:
            body: bytes = response.read()
            return body
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # it trusts any server
    if identity is not None:
        context.load_cert_chain(str(identity / "tls.crt"), str(identity / "tls.key"))
    parts = urlsplit(url)
    connection = http.client.HTTPSConnection(parts.hostname or "", parts.port, timeout=10, context=context)
    try:
        connection.request("GET", parts.path)
        response = connection.getresponse()
        if response.status != 200:
            raise http.client.HTTPException(f"answered {response.status}")
        return response.read()
    finally:
        connection.close()


@pytest.mark.parametrize("foreign", ["no certificate", "another run's certificate"])
def test_a_client_without_the_run_s_certificate_gets_no_state(serving: Any, tmp_path: Path, foreign: str) -> None:
    other = identity_folder(tmp_path / "other", mint("victim"), "member") if foreign != "no certificate" else None
    with pytest.raises((OSError, http.client.HTTPException)):  # ssl.SSLError is an OSError
        fetch(serving.metadata(), 5, other)
    # The client sees the alert before the server's thread counts it: wait (bounded) for the count.
    until(lambda: serving.refused > 0, 10, "counted the refusal", every_s=0.01)
    assert serving.refused == 1
    assert serving.served == 0


def test_a_member_fetches_the_state_and_refuses_a_source_of_another_run(
    serving: Any, member: Path, tmp_path: Path
) -> None:
    assert serving.metadata().startswith("https://127.0.0.1:")
    receiver = heal_transport(run_config(member), lambda: 1 << 20)
    impostor = heal_transport(
        run_config(identity_folder(tmp_path / "other", mint("victim"), "member")), lambda: 1 << 20
    )
    impostor.send_checkpoint([1], 5, STATE, TIMEOUT)
    try:
        assert_same(receiver.recv_checkpoint(0, serving.metadata(), 5, TIMEOUT), STATE)
        assert serving.served == 1
        with pytest.raises(HealRefused, match="not a member of this run"):
            receiver.recv_checkpoint(0, impostor.metadata(), 5, TIMEOUT)
        with pytest.raises(HealRefused, match="not https://host:port/checkpoint/"):
            receiver.recv_checkpoint(0, serving.metadata().replace("https:", "http:"), 5, TIMEOUT)
    finally:
        receiver.shutdown(wait=True)
        impostor.shutdown(wait=True)
    assert impostor.served == 0


def test_the_server_binds_only_the_address_it_announces(member: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bound to the pod's address (here 127.0.0.2), it is not reachable on any other (here 127.0.0.1):
    not on the pod's other interfaces (gVNIC, RDMA NICs), nor on its loopback."""
    monkeypatch.setenv(ADVERTISE_HOST_ENV, "127.0.0.2")
    transport = heal_transport(run_config(member), lambda: 1 << 20)
    try:
        parts = urlsplit(transport.metadata())
        assert (parts.hostname, parts.path) == ("127.0.0.2", "/checkpoint/")
        socket.create_connection(("127.0.0.2", parts.port or 0), timeout=5).close()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", parts.port or 0), timeout=5)
    finally:
        transport.shutdown(wait=True)


def test_the_ranks_of_a_pod_take_the_rule_s_ports_then_any(member: Path) -> None:
    """The first free of the rule's ports (contract.names.HEAL_TLS_PORTS by default: a NetworkPolicy can name
    them), then a free one. Two ports free now stand for the rule's: another test's listener on a port of the
    real range (xdist runs two files at once) would make the choice move on, rightly."""
    assert inspect.signature(TlsHealTransport).parameters["ports"].default == HEAL_TLS_PORTS
    ports = free_ports("127.0.0.3", 2)
    made: list[TlsHealTransport[Any]] = [
        TlsHealTransport(Identity.folder(member), "127.0.0.3", TIMEOUT, lambda: 1, ports) for _ in range(3)
    ]
    try:
        taken = [urlsplit(t.metadata()).port for t in made]
    finally:
        for t in made:
            t.shutdown(wait=True)
    assert taken[:2] == list(ports)
    assert taken[2] not in ports


def test_a_group_heals_from_another_over_the_run_s_tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two groups of one run, the real Lighthouse behind its proxy: the one at step 0 heals from the one at
    step 3 (min_replicas=2, so both are in the first quorum), through the TLS transport."""
    monkeypatch.setenv(ADVERTISE_HOST_ENV, "127.0.0.1")
    with guarded_lighthouse(tmp_path, min_replicas=2) as (address, _, member):
        groups = [honest_group(address, tmp_path / str(i), f"ft.lighthouse_tls={member}") for i in range(2)]
        groups[0].load_state_dict({"step": 3, "batches_committed": 3})
        applied: dict[int, list[Any]] = {0: [], 1: []}
        committed: dict[int, list[bool]] = {}

        def step(i: int) -> None:
            committed[i] = steps(groups[i], 1, applied[i])

        threads = [threading.Thread(target=step, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        try:
            assert groups[0].transport.metadata().startswith("https://127.0.0.1:")
            assert (groups[0].transport.served, groups[1].transport.served) == (1, 0)
            assert [g.current_step() for g in groups] == [4, 4]
        finally:
            for g in groups:
                g.shutdown()
    assert committed == {0: [True], 1: [True]}
    assert applied[0] == []
    assert len(applied[1]) == 1
    assert_same(applied[1][0], {"weight": torch.zeros(2)})
