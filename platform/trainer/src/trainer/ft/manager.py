"""Fault tolerance across replica groups: torchft when ``ft.enabled``, a no-op object with the same calls otherwise.

The trainer makes the same calls either way, so it has no branches on whether fault tolerance is on:

* ``begin_step`` / ``sync_gradients`` / ``report_error`` / ``step``: one inner step's protocol;
* ``register_state``: the trainer's ``state_dict``/``load_state_dict``, which a healing peer fetches;
* ``running``: the context the training loop runs in (DiLoCo's, once the resumed state is final);
* ``current_step``, ``num_participants``, ``failure``, ``bytes_sent``, ``link_stats``, ``state_dict``: what happened.

With torchft each replica group has a Manager (its own TCPStore; gloo on CPU, NCCL on GPU) that
joins the Lighthouse's quorum, heals the group from a live peer and decides per step whether it
commits. DDP averages gradients every step through ``Manager.allreduce`` (ft/gradsync.py); DiLoCo
(``torchft.local_sgd.DiLoCo``) takes inner steps alone and averages pseudo-gradients every
``sync_every / fragments`` of them. Only torchft's public API is used: no private fields, no patched
methods (tests/trainer/test_trainer.py checks the source).
"""

from __future__ import annotations

import copy
import os
import socket
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta
from typing import Any, Protocol

import torch

from contract import names
from trainer.config import Config
from trainer.distributed.group import Rank, fill_local, local, local_shards
from trainer.ft.gradsync import allreduce_gradients

StateDict = dict[str, Any]
RING_STORE_KEY = "meridian/tls_ring_store"  # in a sharded group's own store: where rank 0 serves torchft's store


class FaultTolerance(Protocol):
    """What the trainer asks of fault tolerance. A committed step may take several inner steps (DiLoCo)."""

    inner_steps_per_commit: int

    def register_state(self, state_dict: Callable[[], StateDict], load_state_dict: Callable[[StateDict], None]) -> None:
        """What a healing peer fetches from this group, and how this group applies what it fetched."""

    def running(
        self, fragments: Sequence[torch.nn.Module], inner: torch.optim.Optimizer, outer: Sequence[torch.optim.Optimizer]
    ) -> AbstractContextManager[object]:
        """The context the training loop runs in; enter it after resuming."""

    def begin_step(self) -> None:
        """Before the forward pass."""

    def sync_gradients(self, parameters: Iterable[torch.nn.Parameter]) -> None:
        """After the backward pass: average gradients over the quorum where the algorithm does that each step."""

    def report_error(self, error: Exception) -> None:
        """This step must not commit (e.g. a non-finite loss); call before ``step``."""

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """Step ``optimizer`` if this step may commit; False when no inner step was taken (it does not count)."""

    def current_step(self) -> int:
        """Committed steps."""

    def num_participants(self) -> int:
        """Replica groups in the current quorum."""

    def participation(self) -> tuple[int | None, int]:
        """(this group's place in the current quorum, None while it heals; the quorum's size)."""

    def failure(self) -> str | None:
        """Why the current step cannot commit, if a collective failed (one line); None otherwise."""

    def bytes_sent(self) -> int:
        """Bytes this group handed to all-reduces so far: the communication its steps cost."""

    def link_stats(self) -> dict[str, float]:
        """With the link emulator on (``ft.link_*``): the bytes it put on the wire and the seconds it was busy; else {}."""

    def state_dict(self) -> dict[str, int]:
        """The committed-step counters, for checkpoints (the torchft Manager's state_dict)."""

    def load_state_dict(self, state: dict[str, int]) -> None: ...

    def shutdown(self) -> None: ...


class Lighthouse(Protocol):
    def address(self) -> str: ...

    def shutdown(self) -> None: ...


def fault_tolerance(cfg: Config, where: Rank, lighthouse: str) -> FaultTolerance:
    """Fault tolerance for this rank of its replica group; ``lighthouse`` is the torchft Lighthouse's address (unused when off)."""
    if not cfg.ft.enabled:
        return NoFaultTolerance()
    if cfg.optim.algorithm == "diloco":
        return TorchftDiLoCo(cfg, where, lighthouse)
    return Torchft(cfg, where, lighthouse)


def advertised_host() -> str:
    """The host a group's servers give their peers: $MERIDIAN_ADVERTISE_HOST (the Ray launcher sets the pod's IP:
    in Kubernetes a pod's hostname resolves nowhere else), else this machine's name (the local launcher)."""
    return os.environ.get(names.ADVERTISE_HOST_ENV) or socket.gethostname()


def with_host(url: str, host: str) -> str:
    """`url` (http://name:port/...) with `host` in place of its host name."""
    parts = urllib.parse.urlsplit(url)
    return parts._replace(netloc=f"{host}:{parts.port}").geturl()


def start_lighthouse(cfg: Config) -> Lighthouse:
    """The torchft Lighthouse for the local launcher (Ray runs its own); a stand-in when fault tolerance is off.

    With ``ft.lighthouse`` (a run across regions: gkr's one Lighthouse for the run) none is started here.
    """
    if not cfg.ft.enabled:
        return NoLighthouse()
    if cfg.ft.lighthouse:
        return ExternalLighthouse(cfg.ft.lighthouse)
    from torchft.coordination import LighthouseServer

    server: Lighthouse = LighthouseServer(
        bind="[::]:0",
        min_replicas=cfg.ft.min_replicas,
        join_timeout_ms=1000,
        quorum_tick_ms=100,
        heartbeat_timeout_ms=cfg.ft.heartbeat_timeout_ms,
    )
    return server


def heal_transport(cfg: Config, limit: Callable[[], int]) -> Any:
    """Heal transfers at this pod's address; a healing source's bytes are loaded without running code
    (ft/heal_transport.py), at most ``limit()`` of them. A run with a TLS identity (a run across regions, as for
    the Lighthouse's proxy above) serves and fetches over its mutual TLS, bound to that address only
    (ft/heal_tls.py); otherwise torchft's plain HTTP server (one region: no other team's pod reaches it)."""
    timeout = timedelta(seconds=cfg.ft.timeout_s)
    if cfg.ft.lighthouse_tls:
        from trainer.distributed.mtls import Identity
        from trainer.ft.heal_tls import TlsHealTransport

        return TlsHealTransport(Identity.folder(cfg.ft.lighthouse_tls), advertised_host(), timeout, limit)
    from trainer.ft.heal_transport import WeightsOnlyHTTPTransport

    return WeightsOnlyHTTPTransport(timeout=timeout, limit=limit, host=advertised_host())


class NoLighthouse:
    def address(self) -> str:
        return ""

    def shutdown(self) -> None:
        return None


class ExternalLighthouse:
    """The run's Lighthouse, started and stopped by someone else."""

    def __init__(self, address: str) -> None:
        self._address = address

    def address(self) -> str:
        return self._address

    def shutdown(self) -> None:
        return None


class NoFaultTolerance:
    """``ft.enabled=false``: one replica group alone. A step commits unless an error was reported; nothing is sent."""

    inner_steps_per_commit = 1

    def __init__(self) -> None:
        self.step_count = 0
        self.batches_committed = 0
        self.error: Exception | None = None

    def register_state(self, state_dict: Callable[[], StateDict], load_state_dict: Callable[[StateDict], None]) -> None:
        return None  # no peer ever asks

    def running(
        self, fragments: Sequence[torch.nn.Module], inner: torch.optim.Optimizer, outer: Sequence[torch.optim.Optimizer]
    ) -> AbstractContextManager[object]:
        return nullcontext()

    def begin_step(self) -> None:
        self.error = None

    def sync_gradients(self, parameters: Iterable[torch.nn.Parameter]) -> None:
        return None

    def report_error(self, error: Exception) -> None:
        self.error = error

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        if self.error is None:
            optimizer.step()
            self.step_count += 1
            self.batches_committed += 1
        return True  # retried with the same batch, like an uncommitted torchft step

    def current_step(self) -> int:
        return self.step_count

    def num_participants(self) -> int:
        return 1

    def participation(self) -> tuple[int | None, int]:
        return 0, 1

    def failure(self) -> str | None:
        return None  # no collectives

    def bytes_sent(self) -> int:
        return 0

    def link_stats(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, int]:
        # The torchft Manager's keys: a checkpoint resumes whether fault tolerance was on or off.
        return {"step": self.step_count, "batches_committed": self.batches_committed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step_count, self.batches_committed = int(state["step"]), int(state["batches_committed"])

    def shutdown(self) -> None:
        return None


class Torchft:
    """A torchft Manager for this rank of its replica group; gradients are averaged over the quorum every step (DDP).

    In a sharded group every rank runs a Manager with the group's replica id and its rank in the group;
    rank 0's talks to the Lighthouse for the group. Each rank's all-reduces go to the same rank of the
    other groups, so each local shard is averaged across groups (HSDP), and a healing rank fetches its
    shards from the same rank of a live peer group.
    """

    inner_steps_per_commit = 1
    async_quorum = True  # the quorum is computed during the forward pass

    def __init__(self, cfg: Config, where: Rank, lighthouse: str) -> None:
        import os

        from torchft import Manager

        from trainer.distributed.counted_pg import counted_process_group
        from trainer.distributed.listen import store_on
        from trainer.distributed.regions import cross_group_backend, cross_group_environment, replica_id

        for key, value in cross_group_environment(cfg).items():
            os.environ.setdefault(key, value)  # the pod's own setting wins
        # counted_process_group picks NCCL for "cuda", gloo otherwise; gloo takes CUDA tensors too (distributed/regions.py).
        backend_device = "cuda" if cross_group_backend(cfg) == "nccl" else "cpu"
        self.pg: Any = None
        if not cfg.ft.lighthouse_tls:
            self.pg = counted_process_group(
                backend_device, timedelta(seconds=cfg.ft.timeout_s), cfg.ft.link_rtt_ms, cfg.ft.link_gbps
            )
        if cfg.ft.lighthouse_tls:  # a run across regions: the ring over the run's mTLS instead of gloo (tls_pg.py)
            address, port = self._tls_ring(cfg, where)
        elif where.sharded:  # the group's own store, which torch.distributed's rank 0 serves (distributed/group.py)
            address, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        else:  # a one-process group: a store of its own, listening only at the address its peers reach (listen.py)
            # torchft hands it to the other groups for the cross-group rendezvous: the pod's IP under Ray; with the
            # local launcher every group runs on this machine, so localhost (as before the Ray launcher needed one).
            address = os.environ.get(names.ADVERTISE_HOST_ENV) or "localhost"
            self.store = store_on(address)
            port = self.store.port
        self.param_bytes = 0  # this rank's parameters (running() sets it): what bounds a peer's state
        self.tunnel = None
        if cfg.ft.lighthouse_tls and where.rank == 0:  # only rank 0's Manager talks to the Lighthouse
            from trainer.distributed.mtls import Identity, Proxy

            self.tunnel = Proxy.originating(lighthouse, Identity.folder(cfg.ft.lighthouse_tls))
            lighthouse = self.tunnel.address()
        self.transport = self._transport(cfg)
        self.manager = Manager(
            pg=self.pg,
            load_state_dict=None,  # register_state() adds the trainer's
            state_dict=None,
            min_replica_size=cfg.ft.min_replicas,
            # Sharded: a peer's state is read on torchft's quorum thread, and FSDP2's state_dict hooks swap the
            # module's parameters back to their shards, which must not happen during the training thread's
            # forward pass: the quorum (and any state served) completes before the forward instead.
            use_async_quorum=self.async_quorum and not where.sharded,
            timeout=timedelta(seconds=cfg.ft.timeout_s),
            quorum_timeout=timedelta(seconds=cfg.ft.quorum_timeout_s),
            rank=where.rank,
            world_size=where.size,
            store_addr=address,
            store_port=port,
            lighthouse_addr=lighthouse,
            replica_id=replica_id(cfg, where.group),
            # Every group starts from the same seed, so the weights already agree at step 0; syncing them
            # anyway would have a peer serve its state before its optimizers have any (loop/trainer.py).
            init_sync=False,
            checkpoint_transport=self.transport,
            port=cfg.ft.manager_port or None,  # None: torchft's $TORCHFT_MANAGER_PORT or any (regions.manager_port)
            hostname=advertised_host(),  # what the Lighthouse hands this group's peers (torchft: socket.gethostname())
        )

    def _tls_ring(self, cfg: Config, where: Rank) -> tuple[str, int]:
        """The ring's process group (self.pg) and the store torchft's Managers of this group share, which rank 0
        serves on this pod's address only, its port RENDEZVOUS_OFFSET below rank 0's ring listener: torchft hands
        the other groups the store's address, and they find the ring's rendezvous above it (distributed/tls_ring.py). In a
        sharded group the other ranks read where it is from the group's own store (MASTER_ADDR, in-region)."""
        from torch.distributed import TCPStore  # type: ignore[attr-defined]

        from trainer.distributed.tls_ring import pair_ports, ring_socket

        host, timeout = os.environ.get(names.ADVERTISE_HOST_ENV) or "localhost", timedelta(seconds=cfg.ft.timeout_s)
        group = (
            TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False, timeout=timeout)
            if where.sharded
            else None
        )
        if where.rank == 0:
            self.store_socket, listener = pair_ports(host)  # kept open: the store serves on this socket
            port = self.store_socket.getsockname()[1]
            fd = self.store_socket.fileno()
            self.store = TCPStore(host, port, is_master=True, wait_for_workers=False, master_listen_fd=fd)
            if group is not None:
                group.set(RING_STORE_KEY, f"{host}:{port}")
        else:
            assert group is not None  # rank > 0: a sharded group
            host, _, text = group.get(RING_STORE_KEY).decode().rpartition(":")
            port, listener = int(text), ring_socket(os.environ.get(names.ADVERTISE_HOST_ENV) or "localhost")
        self.pg = self._ring_pg(cfg, listener)
        return host, port

    def _ring_pg(self, cfg: Config, sock: Any) -> Any:
        from trainer.distributed.counted_pg import CountedTlsRing
        from trainer.distributed.link import Link
        from trainer.distributed.mtls import Identity
        from trainer.distributed.tls_ring import RingServer

        server = RingServer(sock, Identity.folder(cfg.ft.lighthouse_tls))
        pg = CountedTlsRing(server, timedelta(seconds=cfg.ft.timeout_s))
        pg.link = Link(cfg.ft.link_rtt_ms, cfg.ft.link_gbps)
        return pg

    def _transport(self, cfg: Config) -> Any:
        """Heal transfers, bounded by what a peer's copy of this rank's state can weigh: parameters, AdamW's
        two moments, DiLoCo's saved parameters and outer momentum (5x the parameters), with slack, and room for
        the small values. Counted from the parameters, never by calling the state_dict: on the quorum thread
        that would race the forward pass (DCP steps an optimizer without state, loop/trainer.py)."""
        return heal_transport(cfg, lambda: 8 * self.param_bytes + 64 * 2**20)

    def register_state(self, state_dict: Callable[[], StateDict], load_state_dict: Callable[[StateDict], None]) -> None:
        def snapshot() -> StateDict:
            # torchft's HTTP transport serves the tensors it is handed until the peer has read them, and on
            # CPU it does not copy them first: without a snapshot, a peer reading while this group takes its
            # next optimizer step gets a mix of two steps (and diverges). Sharded: only this rank's shards.
            return copy.deepcopy(local_shards(state_dict()))

        def apply(received: StateDict) -> None:
            load_state_dict(fill_local(state_dict(), received))

        self.manager.register_state_dict_fn("trainer", apply, snapshot)

    def running(
        self, fragments: Sequence[torch.nn.Module], inner: torch.optim.Optimizer, outer: Sequence[torch.optim.Optimizer]
    ) -> AbstractContextManager[object]:
        from trainer.ft.heal_transport import state_bytes

        self.param_bytes = state_bytes([local(p) for f in fragments for p in f.parameters()])
        return nullcontext()

    def begin_step(self) -> None:
        self.manager.start_quorum()

    def sync_gradients(self, parameters: Iterable[torch.nn.Parameter]) -> None:
        allreduce_gradients(self.manager, parameters)

    def report_error(self, error: Exception) -> None:
        self.manager.report_error(error)

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        if self.manager.should_commit():  # False after a reported error or a failed collective: retried
            optimizer.step()
        return True

    def current_step(self) -> int:
        return int(self.manager.current_step())

    def num_participants(self) -> int:
        return int(self.manager.num_participants())

    def participation(self) -> tuple[int | None, int]:
        size = self.num_participants()  # waits for the quorum
        place = self.manager.participating_rank()
        return (None if place is None or not self.manager.is_participating() else int(place)), max(size, 1)

    def failure(self) -> str | None:
        errored = self.manager.errored()
        if errored is None:
            return None
        text = str(errored.original_exception).splitlines()
        return (text[0] if text else type(errored.original_exception).__name__)[:300]

    def bytes_sent(self) -> int:
        return int(self.pg.bytes_sent)

    def link_stats(self) -> dict[str, float]:
        link = self.pg.link
        return {"link_wire_bytes": link.wire, "link_busy_s": round(link.busy_s, 6)} if link.enabled else {}

    def state_dict(self) -> dict[str, int]:
        state: dict[str, int] = self.manager.state_dict()
        return state

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.manager.load_state_dict(state)

    def shutdown(self) -> None:
        self.manager.shutdown(wait=False)
        # The cross-group process group too, while the process runs: gloo's (torchft lets go of it: its worker
        # threads stop), the ring's listener and links, BabyNCCL's subprocess. A gloo group left to the process's
        # exit is torn down while Python finalizes, and the rank then aborted ("terminate called without an active
        # exception", exit -6) in 9 of 60 processes here, 0 of 60 shut down first (rl/weight_sync.close_group).
        if self.pg is not None:
            self.pg.shutdown()
        if self.tunnel is not None:
            self.tunnel.close()


class TorchftDiLoCo(Torchft):
    """torchft's DiLoCo: inner steps alone, the pseudo-gradient of one fragment averaged every sync_every / fragments."""

    async_quorum = False  # DiLoCo needs the quorum settled before it syncs

    def __init__(self, cfg: Config, where: Rank, lighthouse: str) -> None:
        super().__init__(cfg, where, lighthouse)
        self.sync_every, self.fragment_sync_delay = cfg.optim.sync_every, cfg.optim.fragment_sync_delay
        # torchft syncs one fragment every sync_every / fragments inner steps; each sync is one committed step.
        self.inner_steps_per_commit = cfg.optim.sync_every // cfg.optim.fragments
        self.skip = False

    def running(
        self, fragments: Sequence[torch.nn.Module], inner: torch.optim.Optimizer, outer: Sequence[torch.optim.Optimizer]
    ) -> AbstractContextManager[object]:
        from torchft.local_sgd import DiLoCo

        super().running(fragments, inner, outer)  # the heal bound
        # Built only now: it copies the parameters (the reference of the next outer step) when built. It also
        # registers its own state with the Manager (saved parameters, outer optimizers) for healing peers.
        diloco: AbstractContextManager[object] = DiLoCo(
            self.manager,
            list(fragments),
            inner,
            list(outer),
            sync_every=self.sync_every,
            fragment_sync_delay=self.fragment_sync_delay,
        )
        return diloco

    def begin_step(self) -> None:
        self.skip = False  # DiLoCo starts its own quorums, before each sync

    def sync_gradients(self, parameters: Iterable[torch.nn.Parameter]) -> None:
        return None  # only pseudo-gradients travel, at syncs

    def report_error(self, error: Exception) -> None:
        super().report_error(error)  # a sync in flight (fragment_sync_delay) then does not commit either
        self.skip = True

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        if self.skip:  # the inner step is skipped: its batch is retried
            optimizer.zero_grad()
            return False
        optimizer.step()  # DiLoCo's optimizer hooks count inner steps and sync when one is due
        return True
