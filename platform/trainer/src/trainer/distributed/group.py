"""One rank's place in a sharded replica group: the group's process group, FSDP2, and shard-local state.

A replica group of ``ft.group_size`` ranks shards the model among them with FSDP2 (``fully_shard`` over a
one-dimensional DeviceMesh of the group's ranks). The group's default process group is its own (the
launcher gives each group its own MASTER_ADDR/MASTER_PORT store): collectives inside a group never
involve another group, so a group can die and come back while the others train on. Across groups,
torchft averages each rank's local shards with the same rank of the other groups (ft/manager.py): that is the
HSDP arrangement, with the replicate dimension managed by torchft instead of a fixed mesh.

With ``group_size`` 1 nothing here initializes torch.distributed: today's one-process groups.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from trainer.config import Config


@dataclass(frozen=True)
class Rank:
    """Where this process is: replica group ``group``, rank ``rank`` of ``size`` inside it."""

    group: int
    rank: int = 0
    size: int = 1

    @property
    def sharded(self) -> bool:
        return self.size > 1


def join_group(cfg: Config, group: int) -> Rank:
    """Join this group's process group (env: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, set by the launcher)."""
    size = cfg.ft.group_size
    if size == 1:
        return Rank(group)
    rank = int(os.environ["RANK"])
    # DCP plans and commits over gloo from its background thread, so a CUDA group also gets a CPU backend.
    backend = "cpu:gloo,cuda:nccl" if cfg.ft.device == "cuda" else "gloo"
    if cfg.ft.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    timeout = timedelta(seconds=cfg.ft.timeout_s)
    store = group_store(rank, size, timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=size, timeout=timeout)
    return Rank(group, rank, size)


def group_store(rank: int, size: int, timeout: timedelta) -> Any:
    """The group's rendezvous at MASTER_ADDR:MASTER_PORT, as torch's env:// makes it, but rank 0's listens on
    MASTER_ADDR only (distributed/listen.py): torchft's Manager uses it as the group's store and hands its address to the
    other groups' process groups, so under Ray it is rank 0's pod IP, and nothing else of the pod's serves it."""
    from trainer.distributed.listen import store_on

    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    if rank == 0:  # waits for the group's other ranks, as env:// does
        return store_on(host, port, size, timeout=timeout, wait_for_workers=True)
    return dist.TCPStore(host, port, size, is_master=False, timeout=timeout)  # type: ignore[attr-defined]


def checkpoint_group(where: Rank) -> Any:
    """A gloo process group of the group's ranks for DCP alone (None when the group is one process).

    DCP plans and commits on its background thread while the training thread runs FSDP's collectives:
    on one process group the two would interleave and mismatch.
    """
    return dist.new_group(backend="gloo") if where.sharded else None


def leave_group(where: Rank) -> None:
    if where.sharded and dist.is_initialized():
        dist.destroy_process_group()


def shard(model: nn.Module, blocks: list[nn.Module], cfg: Config) -> None:
    """FSDP2 over the group's ranks: each block is one unit (gathered for its forward/backward), then the rest."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(cfg.ft.device, (cfg.ft.group_size,), mesh_dim_names=("shard",))
    for block in blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)


def local(value: torch.Tensor) -> torch.Tensor:
    """This rank's part of a (possibly sharded) tensor, sharing its storage."""
    return value.to_local() if isinstance(value, DTensor) else value


def local_shards(tree: Any) -> Any:
    """``tree`` with every DTensor replaced by this rank's local shard: what a healing peer's same rank receives.

    Only the shard travels (its layout is the receiver's own, as both groups have the same shape), so the
    transport never pickles a DeviceMesh or a process group.
    """
    if isinstance(tree, torch.Tensor):
        return local(tree)
    if isinstance(tree, dict):
        return {k: local_shards(v) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(local_shards(v) for v in tree)
    return tree


def fill_local(live: Any, received: Any) -> Any:
    """Copy ``received`` (from ``local_shards``) into ``live`` (the receiver's own state dict): DTensors in place."""
    if isinstance(live, DTensor):
        live.to_local().copy_(received)
        return live
    if isinstance(live, dict) and isinstance(received, dict):
        return {k: fill_local(live[k], v) if k in live else v for k, v in received.items()}
    if isinstance(live, list | tuple) and isinstance(received, list | tuple) and len(live) == len(received):
        return type(received)(fill_local(a, b) for a, b in zip(live, received, strict=True))
    return received
