"""weight_sync's wire format over a process group that lives outside any default torch.distributed world.

A vLLM worker already belongs to vLLM's own default group, so it cannot join the trainer's with
``init_process_group``, and ``dist.broadcast`` refuses a group that ``new_group`` did not register.
vLLM's own answer is its ``StatelessProcessGroup`` + ``PyNcclCommunicator`` (examples/offline_inference/
rlhf_utils.py; https://docs.vllm.ai/en/latest/training/weight_transfer/), which needs vllm in the
trainer's process too. ``open_group`` builds the same kind of standalone group from torch alone (a
TCPStore and a ``ProcessGroupNCCL``, or gloo on CPU), so both sides run the same torch bootstrap code
and the trainer's image stays free of vllm.

The bytes are weight_sync's: a header (version, elements, layout digest) then one flat buffer in
``weight_sync.layout`` order. ``PeerSync`` allocates through ``WeightSync`` (one rule for the layout, the
buffer and the header) and differs only in calling a ``Broadcast`` function instead of ``dist.broadcast``.
``pack``/``unpack``/``stamp``/``check`` are the pure steps, tested on CPU without a group.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, cast

import torch
import torch.distributed as dist

from trainer.rl.weight_sync import HEADER, LayoutError, Slot, WeightSync

Broadcast = Callable[[torch.Tensor, int], None]  # (tensor, source rank): in place on every member


def pack(state: Mapping[str, torch.Tensor], slots: Sequence[Slot], buffer: torch.Tensor) -> None:
    """Copy ``state`` into ``buffer`` in layout order (cast to the buffer's dtype); names must match exactly."""
    if set(state) != {s.name for s in slots}:
        missing = sorted({s.name for s in slots} - set(state))[:3]
        unknown = sorted(set(state) - {s.name for s in slots})[:3]
        raise LayoutError(f"the state's names differ from the sync layout (missing {missing}, unknown {unknown})")
    with torch.no_grad():
        for slot in slots:
            buffer[slot.start : slot.start + slot.numel].copy_(state[slot.name].reshape(-1))


def unpack(buffer: torch.Tensor, slots: Sequence[Slot]) -> dict[str, torch.Tensor]:
    """Named views into ``buffer`` (no copy): valid until the buffer is next written."""
    return {s.name: buffer[s.start : s.start + s.numel].view(s.shape) for s in slots}


def stamp(header: torch.Tensor, version: int, elements: int, digest: int) -> None:
    header.copy_(torch.tensor([version, elements, digest], dtype=torch.int64))


def check(header: torch.Tensor, elements: int, digest: int) -> int:
    """The version a received header announces; LayoutError when the sender's layout is not this member's."""
    version, theirs, their_digest = (int(v) for v in header.tolist())
    if (theirs, their_digest) != (elements, digest):
        raise LayoutError(
            f"version {version}: the sender's layout ({theirs} elements, digest {their_digest:x}) is not this "
            f"member's ({elements}, {digest:x}); start both from the same model config and dtype"
        )
    return version


class Group(Protocol):
    """A c10d backend (ProcessGroupNCCL, ProcessGroupGloo) used directly, outside torch.distributed's registry."""

    def broadcast(self, tensor: torch.Tensor, root: int) -> Any: ...


def open_group(
    host: str, port: int, rank: int, world: int, *, backend: str = "nccl", timeout_s: float = 600.0
) -> Group:
    """A group of ``world`` members over a TCPStore at host:port (rank 0 hosts it), registered nowhere.

    Nothing global is touched, so a vLLM worker (already in vLLM's world) and the trainer (in its own)
    can both join. Every member must call it with the same host, port, world and backend.
    """
    from torch.distributed import PrefixStore, TCPStore  # type: ignore[attr-defined]

    timeout = datetime.timedelta(seconds=timeout_s)
    store = PrefixStore("meridian-weights/", TCPStore(host, port, world, is_master=rank == 0, timeout=timeout))
    if backend == "nccl":
        from torch.distributed import ProcessGroupNCCL  # absent from CPU builds of torch

        options = ProcessGroupNCCL.Options()
        options._timeout = timeout
        return cast(Group, ProcessGroupNCCL(store, rank, world, options))  # the stubs omit Backend.broadcast
    if backend == "gloo":
        return cast(Group, dist.ProcessGroupGloo(store, rank, world, timeout))
    raise ValueError(f"backend {backend!r}: nccl or gloo")


def group_broadcast(group: Group) -> Broadcast:
    """A Broadcast over an unregistered group (its own method, not ``dist.broadcast``), waited on."""

    def broadcast(tensor: torch.Tensor, src: int) -> None:
        group.broadcast(tensor, src).wait()

    return broadcast


class PeerSync:
    """One member of a weight sync over any Broadcast: the sender (rank ``src``) or a receiver."""

    def __init__(
        self,
        template: Mapping[str, torch.Tensor],
        broadcast: Broadcast,
        *,
        src: int = 0,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        # WeightSync's constructor touches no group: it is the one place layout and buffers are made.
        own = WeightSync(template, src=src, dtype=dtype, device=device)
        self.slots, self.digest, self.buffer, self.header = own.slots, own.digest, own.buffer, own.header
        assert self.header.numel() == HEADER
        self.src, self.broadcast = src, broadcast

    def send(self, state: Mapping[str, torch.Tensor], version: int) -> None:
        pack(state, self.slots, self.buffer)
        stamp(self.header, version, self.buffer.numel(), self.digest)
        self.broadcast(self.header, self.src)
        self.broadcast(self.buffer, self.src)

    def receive(self) -> tuple[int, dict[str, torch.Tensor]]:
        """(version, state): views into the reused buffer, valid until the next receive."""
        self.broadcast(self.header, self.src)
        version = check(self.header, self.buffer.numel(), self.digest)
        self.broadcast(self.buffer, self.src)
        return version, unpack(self.buffer, self.slots)
