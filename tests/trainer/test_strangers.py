"""Strangers at a run's ports, and a peer lost mid-collective: real torchft Lighthouses, Managers and rings waiting out
their timeouts (seconds each), so a live module of their own (issue 40's fast tier); the ring's and the Lighthouse's
other tests are in test_tls_pg.py and test_lighthouse_mtls.py."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
from trainer.distributed.mtls import Identity, Proxy
from trainer.distributed.tls_ring import RingError

from contract.names import ADVERTISE_HOST_ENV
from gkr.run_tls import mint
from tests.trainer.test_lighthouse_heal import HUGE_STEP, attacker, honest_group, steps
from tests.trainer.test_lighthouse_mtls import guarded_lighthouse, identity_folder
from tests.trainer.test_tls_pg import member, reduce, ring, rings, together

pytestmark = pytest.mark.live

__all__ = ["member"]  # the fixture, shared with test_tls_pg.py


def test_a_lost_peer_fails_the_collective_and_the_next_configure_heals_the_ring(member: Path) -> None:
    """A peer that dies mid-collective or stays silent fails the work within torchft's timeout, never hangs it."""
    with rings(member, 2, timeout=timedelta(seconds=2)) as (pgs, address):
        pgs[1].abort()  # its links close: rank 0's collective sees the ring broken
        with pytest.raises(RingError):
            reduce(pgs[0], torch.ones(1 << 20))
        assert pgs[0].errored() is not None  # torchft's should_commit reads this: the step does not commit
        again = address.replace("/1/0", "/2/0")  # the next quorum's store prefix
        assert together(*[lambda i=i: pgs[i].configure(again, "victim", i, 2) for i in range(2)]) == [None, None]
        assert pgs[0].errored() is None
        with pytest.raises(TimeoutError):  # rank 1 alive but never joins the collective
            reduce(pgs[0], torch.ones(4))


def attempt(pg: Any, address: str, rank: int, value: float) -> torch.Tensor:
    pg.configure(address, "someone", rank, 2)
    return reduce(pg, torch.full((4,), value))


@pytest.mark.parametrize("attacker", ["torchft's plain gloo", "another run's certificate"])
def test_a_process_without_the_run_s_certificate_cannot_join_the_ring(
    tmp_path: Path, attacker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attacker knows the quorum's store address (torchft hands it out in the clear) and asks to be rank 1."""
    from torchft.process_group import ProcessGroupGloo

    pod = "127.0.0.3"  # the honest group's store outlives the test (torchft's Manager holds it): its own address
    monkeypatch.setenv(ADVERTISE_HOST_ENV, pod)
    with guarded_lighthouse(tmp_path, min_replicas=1) as (lighthouse, _, member):
        ft = honest_group(lighthouse, tmp_path / "honest", f"ft.lighthouse_tls={member}", "ft.timeout_s=3")
        address = f"{pod}:{ft.store.port}/torchft/1/0"  # what torchft's configure gives the quorum's members
        if attacker == "torchft's plain gloo":
            foreign: Any = ProcessGroupGloo(timeout=timedelta(seconds=3))
        else:
            foreign = ring(identity_folder(tmp_path / "other", mint("victim"), "member"), timeout=timedelta(seconds=3))
        try:
            honest, stolen = together(
                lambda: attempt(ft.pg, address, 0, 1.0), lambda: attempt(foreign, address, 1, 1e6)
            )
        finally:
            ft.shutdown()
            foreign.shutdown()
    assert isinstance(honest, Exception)  # nobody of the run joined: the honest group's collective fails ...
    assert isinstance(stolen, Exception)  # ... and the attacker neither sent nor received a byte of gradients
    if attacker == "another run's certificate":
        assert ft.pg.ring.server.refused >= 1  # refused at the handshake


@pytest.mark.parametrize("foreign", ["no certificate", "another run's certificate"])
def test_a_foreign_replica_is_refused_at_the_handshake_and_never_in_the_quorum(tmp_path: Path, foreign: str) -> None:
    marker = tmp_path / "code-ran"
    with guarded_lighthouse(tmp_path, min_replicas=1) as (address, proxy, member):
        tunnel = None
        if foreign == "another run's certificate":  # its own run's identity, through the trainer's own proxy
            other = identity_folder(tmp_path / "other", mint("victim"), "member")  # same run name, another CA
            tunnel = Proxy.originating(address, Identity.folder(other))
        try:
            with attacker(tunnel.address() if tunnel else address, marker, timedelta(seconds=3)) as seen:
                ft = honest_group(address, tmp_path / "honest", f"ft.lighthouse_tls={member}")
                applied: list[Any] = []
                committed = steps(ft, 2, applied)
                participants = ft.num_participants()
                ft.shutdown()
        finally:
            if tunnel is not None:
                tunnel.close()
    assert seen["error"] is not None  # the attacker's quorum failed: it never got in
    assert seen["served_to"] == []
    assert (committed, participants, applied) == ([True, True], 1, [])
    assert ft.current_step() == 2 < HUGE_STEP
    assert not marker.exists()
    assert proxy.refused + (tunnel.refused if tunnel else 0) >= 1
