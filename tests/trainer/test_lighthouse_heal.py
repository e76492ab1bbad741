"""A foreign replica in a run's quorum, with the real torchft 0.2.0 Lighthouse and Manager (CPU, gloo, 127.0.0.1).

The attacker is a plain torchft Manager that is no member of the run: it reaches the run's Lighthouse
(which has no authentication), claims step 10^9, and serves a "checkpoint" whose pickle runs code
when loaded. torchft then tells the honest group to heal from it. The honest group is the trainer's
own fault tolerance (trainer.ft.manager), so this checks what the trainer does with what it is sent.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
from trainer.config import compose
from trainer.distributed.group import Rank
from trainer.ft.heal_transport import HealRefused, load_weights_only, source_url
from trainer.ft.manager import Torchft, fault_tolerance

from tests.trainer.conftest import CONFIG, assert_same

HUGE_STEP = 10**9
TIMEOUT = timedelta(seconds=10)


class Payload:
    """What the attacker serves: unpickling it creates ``marker`` (code ran in the loading process)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.mkdir, (str(self.marker),)


@contextmanager
def attacker(lighthouse: str, marker: Path, timeout: timedelta = TIMEOUT) -> Iterator[dict[str, Any]]:
    """A torchft Manager that is not a member of the run: step 10^9, a state that runs code when unpickled.

    It runs one step on a thread, as a replica group would; ``seen`` gets the replica ranks torchft
    told it to serve its state to (the groups told to heal from it) and any error.
    """
    from torch.distributed import TCPStore  # type: ignore[attr-defined]
    from torchft import Manager
    from torchft.checkpointing import HTTPTransport
    from torchft.process_group import ProcessGroupGloo

    seen: dict[str, Any] = {"served_to": [], "error": None}

    class Serving(HTTPTransport[dict[str, Any]]):  # type: ignore[misc]
        """torchft's HTTP transport, noting whom torchft told it to serve: the groups told to heal from it."""

        def send_checkpoint(self, dst_ranks: list[int], step: int, state_dict: Any, timeout: timedelta) -> None:
            seen["served_to"] += dst_ranks
            super().send_checkpoint(dst_ranks, step, state_dict, timeout)

    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    manager = Manager(
        pg=ProcessGroupGloo(timeout=timeout),
        load_state_dict=None,
        state_dict=None,
        min_replica_size=1,
        timeout=timeout,
        quorum_timeout=timeout,
        rank=0,
        world_size=1,
        store_addr="127.0.0.1",
        store_port=store.port,
        lighthouse_addr=lighthouse,
        replica_id="attacker",
        hostname="127.0.0.1",
        connect_timeout=timedelta(seconds=3),
        checkpoint_transport=Serving(timeout=timeout, num_chunks=0),
    )
    # Under the trainer's key, so the honest group applies it as its own state.
    manager.register_state_dict_fn("trainer", lambda _: None, lambda: {"weight": Payload(marker)})
    manager.load_state_dict({"step": HUGE_STEP, "batches_committed": HUGE_STEP})

    def one_round() -> None:  # min_replicas=2: the first quorum holds the attacker and the honest group
        try:
            manager.start_quorum()
            manager.allreduce(torch.zeros(2)).wait()  # a replica's step, so nobody waits on it
            manager.should_commit()
        except Exception as error:  # refused (mTLS) or timed out: what the test looks at
            seen["error"] = error

    thread = threading.Thread(target=one_round, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        thread.join(timeout=30)
        manager.shutdown(wait=False)


def honest_group(lighthouse: str, tmp_path: Path, *extra: str) -> Torchft:
    cfg = compose(
        CONFIG,
        [
            "run.name=victim",
            f"ft.lighthouse={lighthouse}",
            f"checkpoint.dir={tmp_path / 'ckpt'}",
            "ft.timeout_s=10",
            "ft.quorum_timeout_s=10",
            *extra,
        ],
    )
    ft = fault_tolerance(cfg, Rank(0), lighthouse)
    assert isinstance(ft, Torchft)
    return ft


def steps(ft: Torchft, count: int, applied: list[Any]) -> list[bool]:
    """``count`` DDP steps of a one-parameter model, each True if it committed; ``applied`` gets any state healed in."""
    weight = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    ft.register_state(lambda: {"weight": weight.detach().clone()}, applied.append)
    committed = []
    for _ in range(count):
        ft.begin_step()
        weight.grad = torch.ones(2)
        ft.sync_gradients([weight])
        before = ft.current_step()
        ft.step(optimizer)
        committed.append(ft.current_step() > before)
    return committed


@pytest.fixture
def plain_lighthouse() -> Iterator[str]:
    from torchft.coordination import LighthouseServer

    # min_replicas=2: the quorum forms only once the attacker has joined, so the test never races it.
    server = LighthouseServer(
        bind="127.0.0.1:0", min_replicas=2, join_timeout_ms=200, quorum_tick_ms=50, heartbeat_timeout_ms=2000
    )
    try:
        yield server.address()
    finally:
        server.shutdown()


def test_a_foreign_replica_in_the_quorum_cannot_run_code_in_the_healing_group(
    plain_lighthouse: str, tmp_path: Path
) -> None:
    """Without authentication the attacker does join, and torchft tells the honest group to heal from it:
    what it serves must not be unpickled as code, and the healing step must not commit."""
    marker = tmp_path / "code-ran"
    ft = honest_group(plain_lighthouse, tmp_path)
    applied: list[Any] = []
    try:
        with attacker(plain_lighthouse, marker) as seen:
            (committed,) = steps(ft, 1, applied)
        # The plain Lighthouse let it in and told the honest group to heal from it (hence mTLS: test_lighthouse_mtls.py).
        assert seen["served_to"] == [1]
    finally:
        ft.shutdown()
    assert not marker.exists(), "the attacker's pickle ran code in the honest group"
    assert not committed
    assert applied == []
    assert ft.current_step() < HUGE_STEP


def _served(state: object) -> io.BytesIO:
    """``state`` as torchft's HTTP server writes it (PyTorch's streaming format)."""
    from torch.distributed._serialization import _streaming_save

    buffer = io.BytesIO()
    _streaming_save(state, buffer)
    buffer.seek(0)
    return buffer


def test_a_real_state_loads_weights_only() -> None:
    """What a trainer group serves (model, AdamW after a step, torchft's counters) loads without any allowlist."""
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    state = {
        "user": {"trainer": {"model": model.state_dict(), "optim": optimizer.state_dict()}},
        "torchft": {"step": 3},
    }
    loaded = load_weights_only(_served(state), limit=1 << 20)
    assert_same(loaded, state)


def test_a_source_cannot_point_elsewhere_or_send_too_much(tmp_path: Path) -> None:
    for announced in (
        "file:///etc/passwd#",
        "http://evil/other/",
        "https://h:1/checkpoint/",
        "http://h:1/checkpoint/x",
    ):
        with pytest.raises(HealRefused, match="not http://host:port/checkpoint/"):
            source_url(announced, 5)
    assert source_url("http://10.0.0.7:4242/checkpoint/", 5) == "http://10.0.0.7:4242/checkpoint/5/full"
    assert source_url("http://[::1]:4242/checkpoint/", 5) == "http://[::1]:4242/checkpoint/5/full"
    with pytest.raises(HealRefused, match="more than"):
        load_weights_only(_served({"w": torch.zeros(1 << 16)}), limit=1 << 12)
    with pytest.raises(HealRefused, match="does not load"):
        load_weights_only(_served({"w": Payload(tmp_path / "ran")}), limit=1 << 20)
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("algorithm", ["ddp", "streaming_diloco"])
def test_a_trainer_s_whole_state_loads_weights_only(tmp_path: Path, algorithm: str) -> None:
    """The state a trainer group serves its peers (model, optimizers, counters, data position, RNG) needs no allowlist."""
    from tests.trainer.test_trainer import config, trained

    extra = (f"optim={algorithm}", "ft.enabled=true") if algorithm != "ddp" else ()
    state = trained(config(tmp_path, *extra), 3).state_dict()
    assert_same(load_weights_only(_served(state), limit=1 << 30), state)


def test_peers_are_given_the_pods_address_not_its_hostname(monkeypatch: pytest.MonkeyPatch) -> None:
    """In Kubernetes a pod's hostname resolves in no other pod (cluster DNS names Services): torchft advertises
    socket.gethostname() for its heal server, Manager and Lighthouse, so the Ray launcher hands them the pod's IP
    (found by make twin: groups on a worker pod could not reach the Lighthouse on the head pod)."""
    from trainer.ft.heal_transport import WeightsOnlyHTTPTransport
    from trainer.ft.manager import advertised_host, with_host

    from contract.names import ADVERTISE_HOST_ENV

    monkeypatch.setenv(ADVERTISE_HOST_ENV, "10.213.0.7")
    assert advertised_host() == "10.213.0.7"
    transport: WeightsOnlyHTTPTransport[Any] = WeightsOnlyHTTPTransport(
        timedelta(seconds=5), lambda: 1, host=advertised_host()
    )
    try:
        assert transport.metadata().startswith("http://10.213.0.7:")
        assert transport.metadata().endswith("/checkpoint/")
    finally:
        transport.shutdown()
    assert with_host("http://head-pod-x7:29510", "10.213.0.2") == "http://10.213.0.2:29510"
    monkeypatch.delenv(ADVERTISE_HOST_ENV)
    assert advertised_host() == __import__("socket").gethostname()  # the local launcher: one machine
