"""Weight sync, trainer -> generators: each version broadcast bucket by bucket over a process group, stamped.

Every member builds the same layout from the model's state dict (names sorted, shapes, the wire dtype, cut into
buckets of at most ``rl.sync_bucket_mb`` of whole tensors), so the wire carries only numbers: per bucket a header
(version, bucket index, elements, layout digest) and one flat buffer, which each member allocates once (one
bucket) and reuses. The sender sends a ``Snapshot`` taken after the commit, never the live parameters the
optimizer writes: the model cast to the wire dtype bucket by bucket, a sharded group's DTensors gathered one
tensor at a time, kept on the sending rank only. A receiver hands each bucket to its engine's load before the
next (TorchGenerator copies it into its weights; vLLM's ``load_weights`` keeps each worker's tensor-parallel
slice), so no generator holds more than one bucket beyond its weights. gloo on CPU and NCCL on GPU run this
same code. Memory per rank and per generator GPU, measured: the RL README, "Memory".

The group is either a registered one (``init_process_group``/``new_group``: ``dist.broadcast``) or a
standalone c10d backend from ``open_group``, registered nowhere and passed per call (``group=``), which
touches no default world. Two callers make standalone groups, both through ``open_group``:

- pairs.py: a trainer group's sender and one generator meet in the TCP store the controller hosts
  (``host_store=False``), one two-member group per (trainer group, generator) pair;
- the vLLM path (vllm_worker.py, scripts/gpu_rl.py): vLLM's workers already belong to vLLM's own default
  group, so the trainer, rank 0, hosts the store (``host_store=True``) and every worker joins it. vLLM's
  own recipe (``StatelessProcessGroup`` + ``PyNcclCommunicator``, https://docs.vllm.ai/en/latest/training/
  weight_transfer/) would need vllm in the trainer's image; this needs torch alone on both sides.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import cast

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend, PrefixStore
from torch.distributed.tensor import DTensor, Shard

from trainer.distributed.listen import store_on

log = logging.getLogger("trainer.rl")

HEADER = 4  # version, bucket index, elements, layout digest (63 bits)
BUCKET_MB = 1024  # rl.sync_bucket_mb's default: README, "Memory: what each rank and generator GPU holds"


@dataclass(frozen=True, kw_only=True)
class Slot:
    name: str
    shape: tuple[int, ...]
    start: int  # within its bucket
    numel: int


@dataclass(frozen=True, kw_only=True)
class Bucket:
    """Whole tensors, consecutive by name, sent as one flat buffer; at most the bucket size unless one tensor is
    larger (it travels alone: a receiver hands whole tensors to the engine, never a part of one)."""

    slots: tuple[Slot, ...]
    numel: int


class LayoutError(ValueError):
    """The two sides disagree on what is sent: a different model, dtype or bucket size; never loaded."""


def layout(
    state: Mapping[str, torch.Tensor], dtype: torch.dtype = torch.float32, bucket_bytes: int = BUCKET_MB << 20
) -> tuple[list[Bucket], int]:
    """The buckets (names sorted, each tensor whole) and a digest both sides compare."""
    limit = max(1, bucket_bytes // torch.empty((), dtype=dtype).element_size())
    buckets: list[Bucket] = []
    slots: list[Slot] = []
    start = 0
    for name in sorted(state):
        shape, numel = tuple(state[name].shape), int(state[name].numel())
        if slots and start + numel > limit:
            buckets.append(Bucket(slots=tuple(slots), numel=start))
            slots, start = [], 0
        slots.append(Slot(name=name, shape=shape, start=start, numel=numel))
        start += numel
    if slots:
        buckets.append(Bucket(slots=tuple(slots), numel=start))
    # The wire dtype too: a bf16 buffer read as fp32 would be the right length in bytes and nonsense; and the
    # bucket size, since the two sides must cut the same buckets.
    names = ";".join(f"{s.name}:{s.shape}" for b in buckets for s in b.slots)
    text = f"{dtype};{bucket_bytes};{names}".encode()
    digest = int.from_bytes(hashlib.sha256(text).digest()[:8], "big") >> 1  # fits a signed int64
    return buckets, digest


@dataclass(frozen=True)
class Snapshot:
    """What a sync sends, taken after a commit: each bucket's flat tensor in the wire dtype (empty on a sharded
    group's other ranks), and the most one gather allocated on this rank (bytes), which the accounting test and
    scripts/bench_rl_memory.py read."""

    buckets: list[torch.Tensor]
    gathered_bytes: int = 0


def snapshot(
    buckets: Sequence[Bucket], state: Mapping[str, torch.Tensor], dtype: torch.dtype, *, keep: bool = True
) -> Snapshot:
    """Every bucket of ``state`` cast to ``dtype``, in host memory (pinned on a CUDA host), one at a time.

    Taken after the commit, so nothing the optimizer writes later reaches a generator. A sharded tensor (a
    DTensor of an FSDP2 group) is gathered one tensor at a time, cast to ``dtype`` on each rank's shard first:
    every rank of the group calls this for the same buckets in the same order (the gathers are collectives).
    Only the sending rank (``keep``, the group's rank 0) receives each whole tensor and copies it into its
    buckets; the others only send their shard, and hold nothing afterwards. No rank ever holds the whole model in
    fp32 beside its own training state.
    """
    kept: list[torch.Tensor] = []
    gathered = 0
    with torch.no_grad():
        for bucket in buckets:
            flat = torch.empty(bucket.numel, dtype=dtype, pin_memory=torch.cuda.is_available()) if keep else None
            for slot in bucket.slots:
                tensor = state[slot.name].detach()
                out = None if flat is None else flat[slot.start : slot.start + slot.numel].view(slot.shape)
                if isinstance(tensor, DTensor):
                    gathered = max(gathered, gather(tensor, dtype, out))
                elif out is not None:
                    out.copy_(tensor)
            if flat is not None:
                kept.append(flat)
    return Snapshot(kept, gathered)


def named(buckets: Sequence[Bucket], taken: Snapshot) -> dict[str, torch.Tensor]:
    """A kept snapshot as the model's state by name: views into its buckets, no copy (the held-out evaluation
    reads the weights the generators get, in the wire dtype)."""
    return {
        s.name: flat[s.start : s.start + s.numel].view(s.shape)
        for bucket, flat in zip(buckets, taken.buckets, strict=True)
        for s in bucket.slots
    }


def gather(tensor: DTensor, dtype: torch.dtype, out: torch.Tensor | None) -> int:
    """The whole of ``tensor`` in ``dtype`` into ``out`` on the group's rank 0 (the one passing ``out``), from every
    rank's shard; returns the bytes this rank allocated for it: its shard cast and padded, and on rank 0 the
    gathered chunks (one whole tensor, padded).

    FSDP2 shards dim 0 as ``torch.chunk`` does (rank i: rows [i * c, (i + 1) * c), c = ceil(rows / n)); a gather to
    one rank, not an all-gather, so that only the sending rank ever holds the whole tensor. Another placement
    (not FSDP2's) is gathered whole on every rank (``full_tensor``).
    """
    if tensor.placements != (Shard(0),) or tensor.device_mesh.ndim != 1:
        whole = cast(DTensor, tensor.to(dtype)).full_tensor()
        if out is not None:
            out.copy_(whole)
        return whole.numel() * whole.element_size()
    group = tensor.device_mesh.get_group()
    ranks, rows = dist.get_world_size(group), tensor.shape[0]
    chunk = -(-rows // ranks)
    local = tensor.to_local()
    padded = torch.zeros((chunk, *tensor.shape[1:]), dtype=dtype, device=local.device)
    padded[: local.shape[0]].copy_(local)
    chunks = [torch.empty_like(padded) for _ in range(ranks)] if out is not None else None
    dist.gather(padded, chunks, dst=dist.get_global_rank(group, 0), group=group)
    if out is not None:
        assert chunks is not None
        for i, part in enumerate(chunks):
            take = max(0, min(chunk, rows - i * chunk))
            out[i * chunk : i * chunk + take].copy_(part[:take])
    size = padded.numel() * padded.element_size()
    return size * (1 + ranks if out is not None else 1)


def open_group(
    host: str,
    port: int,
    rank: int,
    world: int,
    *,
    backend: str,
    timeout_s: float,
    prefix: str,
    host_store: bool,
) -> Backend:
    """Member ``rank`` of a ``world``-member group over the TCP store at host:port, registered nowhere.

    ``host_store``: this member serves the store (the vLLM path's trainer) instead of joining one served
    elsewhere (the controller's, for pairs). ``prefix`` keeps groups sharing one store apart. Blocks until
    all ``world`` members are in; every member passes the same host, port, world, backend and prefix.
    """
    timeout = timedelta(seconds=timeout_s)
    # Every member counts itself in (world): a member hosting the store waits for all of them (the NCCL group
    # itself meets only at its first broadcast); a store hosted elsewhere (the controller's) waits for nobody.
    if host_store:  # listening on `host` only (distributed/listen.py), which every member dials
        store = store_on(host, port, world, timeout=timeout, wait_for_workers=True)
    else:
        store = dist.TCPStore(host, port, world, is_master=False, timeout=timeout)  # type: ignore[attr-defined]
    prefixed = PrefixStore(prefix, store)
    if backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()  # absent from CPU builds of torch: only reached on GPU
        options._timeout = timeout
        return dist.ProcessGroupNCCL(prefixed, rank, world, options)
    if backend == "gloo":
        return dist.ProcessGroupGloo(prefixed, rank, world, timeout)
    raise ValueError(f"backend {backend!r}: nccl or gloo")


def close_group(group: Backend | None) -> None:
    """Shut ``group`` (``open_group``'s) down; the caller then lets go of it. Every process that opens one closes it
    before it exits.

    A group still held when the process exits is torn down while Python finalizes, and a backend thread that then
    lets go of a tensor it was handed needs the GIL: the process aborts ("terminate called without an active
    exception", SIGABRT). Measured here (gloo, torch 2.13, three processes that each hold a group until exit): 12
    of 60 aborted; with the group let go first, 0 of 75. ``shutdown`` is NCCL's way to end its communicators; gloo's
    worker threads stop when the last reference to the group goes (checked: test_weight_sync.py), so the caller
    must keep none. A group that is already broken (its peer died) has nothing left to stop.
    """
    if group is None:
        return
    try:
        group.shutdown()
    except Exception as error:  # a failed peer's group: what it raises changes nothing here
        log.debug("closing a weight-sync group: %s", error)


class WeightSync:
    """One member of the sync group: the trainer's sending rank (`src`) or a generator.

    A version travels bucket by bucket (``layout``): a header (version, bucket index, elements, digest) then the
    bucket, through one bucket-sized buffer each member allocates once and reuses. A receiver hands each bucket's
    tensors to ``load`` (the engine copies them into its own weights) before the next arrives, so no member holds
    more than one bucket beyond its engine's weights.
    """

    def __init__(
        self,
        template: Mapping[str, torch.Tensor],
        *,
        src: int,
        group: dist.ProcessGroup | None = None,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        bucket_bytes: int = BUCKET_MB << 20,
    ) -> None:
        """``template``: names and shapes only (meta tensors do); ``group``: a registered group, or None for
        the default one, used when a call passes no ``group=``."""
        self.buckets, self.digest = layout(template, dtype, bucket_bytes)
        self.src, self.group, self.dtype, self.device = src, group, dtype, torch.device(device)
        largest = max((b.numel for b in self.buckets), default=0)
        self.buffer = torch.empty(largest, dtype=dtype, device=device)  # reused for every bucket of every version
        self.header = torch.zeros(HEADER, dtype=torch.int64, device=device)

    @property
    def buffer_bytes(self) -> int:
        return self.buffer.numel() * self.buffer.element_size()

    def snapshot(self, state: Mapping[str, torch.Tensor], *, keep: bool = True) -> Snapshot:
        """``state`` in this sync's buckets and wire dtype (module ``snapshot``)."""
        return snapshot(self.buckets, state, self.dtype, keep=keep)

    def pack(self, index: int, state: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Bucket ``index`` of ``state`` cast into the buffer: a view of it, valid until the next pack."""
        bucket = self.buckets[index]
        missing = [s.name for s in bucket.slots if s.name not in state]
        if missing:
            raise LayoutError(f"the state lacks {missing[:3]} of the sync layout")
        out = self.buffer[: bucket.numel]
        with torch.no_grad():
            for slot in bucket.slots:
                out[slot.start : slot.start + slot.numel].copy_(state[slot.name].reshape(-1))
        return out

    def views(self, index: int, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Bucket ``index``'s named views into ``flat`` (no copy)."""
        return {s.name: flat[s.start : s.start + s.numel].view(s.shape) for s in self.buckets[index].slots}

    def check(self, index: int, version: int | None) -> int:
        """The version the header announces for bucket ``index``; LayoutError when the sender's layout is not this
        member's, or when a bucket comes out of turn (``version``: the one the first bucket announced)."""
        got, got_index, elements, digest = (int(v) for v in self.header.tolist())
        expected = (index, self.buckets[index].numel, self.digest)
        if (got_index, elements, digest) != expected or (version is not None and got != version):
            raise LayoutError(
                f"version {got}: the sender's bucket {got_index} ({elements} elements, digest {digest:x}) is not "
                f"this member's bucket {index} ({expected[1]}, {self.digest:x}); start both from the same model "
                "config, wire dtype and rl.sync_bucket_mb"
            )
        return got

    def send(self, state: Mapping[str, torch.Tensor] | Snapshot, version: int, group: Backend | None = None) -> None:
        """Broadcast ``state`` as policy ``version``, bucket by bucket; blocks until every member received it.

        ``state``: a ``Snapshot`` of this layout (sent as is, each bucket copied to the wire's device if it is not
        there), or whole tensors by name (each bucket cast into the buffer first: tests and small models).
        ``group``: a standalone group (``open_group``) for this call instead of the constructor's (a sender
        serving generators pair by pair reuses one buffer for all of them).
        """
        if isinstance(state, Snapshot):
            if [t.numel() for t in state.buckets] != [b.numel for b in self.buckets]:
                raise LayoutError(f"version {version}: the snapshot's buckets are not this sync's layout")
        else:
            names = {s.name for b in self.buckets for s in b.slots}
            if set(state) != names:
                missing, unknown = sorted(names - set(state))[:3], sorted(set(state) - names)[:3]
                raise LayoutError(
                    f"version {version}: the state's names differ from the sync layout "
                    f"(missing {missing}, unknown {unknown})"
                )
        for index, bucket in enumerate(self.buckets):
            if isinstance(state, Snapshot):
                flat = state.buckets[index]
                if flat.device != self.device:  # host snapshot -> the GPU buffer NCCL sends from
                    flat = self.buffer[: bucket.numel].copy_(flat, non_blocking=True)
            else:
                flat = self.pack(index, state)
            self.header.copy_(torch.tensor([version, index, bucket.numel, self.digest]))
            self._broadcast(self.header, group)
            self._broadcast(flat, group)

    def receive(self, load: Callable[[dict[str, torch.Tensor]], None], group: Backend | None = None) -> int:
        """Receive one version bucket by bucket, handing each bucket's named views to ``load`` (valid only during
        the call: copy them to keep); returns the version. On a failure part of the buckets may have been loaded:
        the caller must not use what it loaded as that version."""
        version = None
        for index, bucket in enumerate(self.buckets):
            self._broadcast(self.header, group)
            version = self.check(index, version)  # on a mismatch the bucket broadcast would not match: refuse
            flat = self.buffer[: bucket.numel]
            self._broadcast(flat, group)
            load(self.views(index, flat))
        if version is None:
            raise LayoutError("the sync layout is empty: the template has no tensors")
        return version

    def _broadcast(self, tensor: torch.Tensor, group: Backend | None) -> None:
        if group is None:
            dist.broadcast(tensor, self.src, group=self.group)
            return
        # A standalone group (open_group): its own broadcast, not dist.broadcast, which refuses it.
        options = dist.BroadcastOptions()
        options.rootRank = self.src
        group.broadcast([tensor], options).wait()  # type: ignore[attr-defined]  # stubs lack Backend.broadcast
