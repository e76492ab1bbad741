"""Who may join a run: the real torchft Lighthouse behind trainer.distributed.mtls, with certificates gkr mints per run.

The honest groups are the trainer's own fault tolerance (trainer.ft.manager with ft.lighthouse_tls), each
reaching the Lighthouse through its local proxy; the attacker is a plain torchft Manager claiming
step 10^9 (test_lighthouse_heal.attacker), without the run's certificate or with another run's.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from trainer.distributed.mtls import Identity, MtlsError, Proxy

from gkr.run_tls import Identity as Minted
from gkr.run_tls import mint
from tests.trainer.test_lighthouse_heal import honest_group, steps


def identity_folder(folder: Path, minted: Minted, role: str) -> Path:
    """``role``'s identity as the pod mounts its Secret (ca.crt, tls.crt, tls.key)."""
    cert, key = minted.lighthouse if role == "lighthouse" else minted.member
    folder.mkdir(parents=True)
    for file, text in (("ca.crt", minted.ca), ("tls.crt", cert), ("tls.key", key)):
        (folder / file).write_text(text)
    return folder


@contextmanager
def guarded_lighthouse(tmp_path: Path, min_replicas: int) -> Iterator[tuple[str, Proxy, Path]]:
    """The real Lighthouse on loopback behind the terminating proxy; yields its address, the proxy, the member identity."""
    from torchft.coordination import LighthouseServer

    minted = mint("victim")
    server = LighthouseServer(
        bind="127.0.0.1:0", min_replicas=min_replicas, join_timeout_ms=200, quorum_tick_ms=50, heartbeat_timeout_ms=2000
    )
    inner = server.address().rsplit(":", 1)
    proxy = Proxy.terminating(
        ("127.0.0.1", 0),
        (inner[0].split("//")[-1], int(inner[1])),
        Identity.folder(identity_folder(tmp_path / "lh", minted, "lighthouse")),
    )
    try:
        yield f"http://127.0.0.1:{proxy.port}", proxy, identity_folder(tmp_path / "member", minted, "member")
    finally:
        proxy.close()
        server.shutdown()


def test_the_run_s_groups_form_their_quorum_through_the_proxies(tmp_path: Path) -> None:
    with guarded_lighthouse(tmp_path, min_replicas=2) as (address, proxy, member):
        groups = [honest_group(address, tmp_path / str(i), f"ft.lighthouse_tls={member}") for i in range(2)]
        results: dict[int, Any] = {}

        def step(i: int) -> None:
            results[i] = (steps(groups[i], 1, []), groups[i].num_participants())

        threads = [threading.Thread(target=step, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        for g in groups:
            g.shutdown()
    assert results == {0: ([True], 2), 1: ([True], 2)}
    assert proxy.refused == 0


def test_a_member_refuses_a_lighthouse_of_another_run(tmp_path: Path) -> None:
    """A fake Lighthouse (another run's CA) cannot hand a member a quorum: the member's proxy drops it."""
    with guarded_lighthouse(tmp_path, min_replicas=1) as (address, _, _):
        mine = identity_folder(tmp_path / "mine", mint("victim"), "member")
        tunnel = Proxy.originating(address, Identity.folder(mine))
        try:
            import socket

            with socket.create_connection(("127.0.0.1", tunnel.port), timeout=10) as s:
                s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
                assert s.recv(1) == b""  # closed: the handshake with the other run's Lighthouse failed
        finally:
            tunnel.close()
    assert tunnel.refused == 1


def test_a_missing_identity_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(MtlsError, match=r"no ca.crt, tls.crt, tls.key; mount the run's TLS Secret"):
        Identity.folder(tmp_path)
