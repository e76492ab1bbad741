"""Weights from a trainer group to each generator, over a two-member process group per (group, generator) pair.

The controller names a pair when a generator needs a newer version (controller.py); both sides meet in
the controller's TCP store under that name and build a gloo (CPU) or NCCL (GPU) group, kept for the next
versions: the sender (rank 0) and the generator's receiving processes (ranks 1..: one for TorchGenerator,
each tensor-parallel worker for vLLM, engines.py), ``world`` members in all, as the controller says. A pair, not one group over all generators, so that a generator that dies or restarts
breaks only its own transfer (and a new pair is named), never the others'; the cost is that the sender
sends once per generator (README, "Weight sync"). The sender serves from a snapshot taken after the
commit (``offer``; weight_sync.Snapshot: the model in the wire dtype, in host memory, on the group's rank 0
only), on its own thread, so training goes on while it sends, bucket by bucket.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

import torch
from torch._C._distributed_c10d import Backend

from trainer.rl.service import Client
from trainer.rl.weight_sync import Snapshot, WeightSync, close_group, open_group

log = logging.getLogger("trainer.rl")


def wire(device: torch.device) -> torch.dtype:
    """The pairs' wire dtype, the same on both sides (the layout digest has it): bf16 on GPU, what vLLM holds and
    half the bytes (the cost model's); fp32 on CPU, where the tests compare weights bit for bit."""
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def prefix(pair: str) -> str:
    """The pair's keys in the controller's store."""
    return f"pair/{pair}"


def pair_group(
    host: str, port: int, pair: str, rank: int, timeout_s: float, device: torch.device, *, world: int
) -> Backend:
    """Rank ``rank`` (0: the trainer, 1..world-1: the generator's) of the pair named ``pair``; blocks until all are in."""
    return open_group(
        host, port, rank, world, backend=backend_for(device), timeout_s=timeout_s, prefix=prefix(pair), host_store=False
    )


class WeightServer:
    """Rank 0 of a trainer group: serves the newest snapshot to the generators the controller sends it."""

    def __init__(self, client: Client, group: int, token: str, sync: WeightSync, *,
                 store_port: int, timeout_s: float, device: torch.device) -> None:  # fmt: skip
        """``sync``: the group's layout (rank 0's, whose snapshots it serves)."""
        self.client, self.group, self.token, self.store_port = client, group, token, store_port
        self.timeout_s, self.device = timeout_s, device
        self.sync = sync
        self.pairs: dict[str, Backend] = {}
        self.latest: tuple[int, Snapshot] | None = None
        self.lock = threading.Lock()
        self.last_seconds = 0.0  # the last transfer's
        self.sent = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="rl-weights", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def offer(self, version: int, snapshot: Snapshot) -> None:
        """The newest version to serve; one being sent goes on with the previous snapshot, freed after it."""
        with self.lock:
            self.latest = (version, snapshot)

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                transfers = self.client.post("/transfers", {"group": self.group, "token": self.token})["transfers"]
            except Exception as error:  # the controller restarting or gone: ask again, or stop with the run
                log.warning("weight server: %s", error)
                self.stopping.wait(1.0)
                continue
            for transfer in transfers:
                self._send(str(transfer["pair"]), int(transfer["world"]))

    def _send(self, pair: str, world: int) -> None:
        with self.lock:
            latest = self.latest
        if latest is None:
            return
        started = time.perf_counter()
        try:
            group = self._group(pair, world)
            if group is None:
                return
            self.sync.send(latest[1], latest[0], group=group)
        except Exception as error:  # the generator died or never came: only this pair is lost
            log.warning("weight server: version %d to pair %s failed: %s", latest[0], pair, str(error)[:200])
            with self.lock:
                close_group(self.pairs.pop(pair, None))
            return
        self.last_seconds = time.perf_counter() - started
        self.sent += 1

    def _group(self, pair: str, world: int) -> Backend | None:
        """The pair's group, made at its first transfer and kept; None once stopping (stop() closes what is kept,
        and one made while it ran is closed here)."""
        group = self.pairs.get(pair)
        if group is not None:
            return group
        group = pair_group(self.client.host, self.store_port, pair, 0, self.timeout_s, self.device, world=world)
        with self.lock:
            if not self.stopping.is_set():
                self.pairs[pair] = group
                return group
        close_group(group)
        return None

    def stop(self) -> None:
        """Serve nothing more, and close every pair (weight_sync.close_group: before the process exits)."""
        with self.lock:
            self.stopping.set()
            groups, self.pairs = list(self.pairs.values()), {}
        for group in groups:
            close_group(group)


class WeightReceiver:
    """A generator's side with one receiving process (TorchGenerator's): the pair is of two."""

    def __init__(self, template: Mapping[str, torch.Tensor], *, host: str, timeout_s: float, device: torch.device,
                 bucket_bytes: int) -> None:  # fmt: skip
        self.host, self.timeout_s, self.device = host, timeout_s, device
        self.sync = WeightSync(template, src=0, dtype=wire(device), device=device, bucket_bytes=bucket_bytes)
        self.pair: tuple[str, Backend] | None = None

    def receive(self, pair: str, store_port: int, load: Callable[[dict[str, torch.Tensor]], None]) -> int:
        """The version received, each bucket handed to ``load``; raises when the sender fails (the controller then
        names a new pair)."""
        if self.pair is None or self.pair[0] != pair:
            self.close()  # a new sender: the old pair's group is done with
            self.pair = (pair, pair_group(self.host, store_port, pair, 1, self.timeout_s, self.device, world=2))
        try:
            return self.sync.receive(load, group=self.pair[1])
        except Exception:
            self.close()
            raise

    def close(self) -> None:
        """Close the pair's group, if any (weight_sync.close_group: before the process exits)."""
        if self.pair is not None:
            close_group(self.pair[1])
            self.pair = None
