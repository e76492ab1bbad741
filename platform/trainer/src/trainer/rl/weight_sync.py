"""Weight sync, trainer -> generators: one broadcast per version over a process group, stamped with the version.

Every member builds the same layout from the model's state dict (names sorted, shapes, one transfer
dtype), so the wire carries only numbers: a header (version, element count, layout digest) and one flat
buffer that each side allocates once and reuses for every version. The sender packs a snapshot taken
after the commit (generate.snapshot), never the live parameters the optimizer writes. gloo on CPU and
NCCL on GPU run this same code; the generators copy what they receive into their own memory
(Generator.load_weights), so the next version's broadcast cannot change weights a generation is using.

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
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend, PrefixStore

from trainer.distributed.listen import store_on

HEADER = 3  # version, elements, layout digest (63 bits)


@dataclass(frozen=True, kw_only=True)
class Slot:
    name: str
    shape: tuple[int, ...]
    start: int
    numel: int


class LayoutError(ValueError):
    """The two sides disagree on what is sent: a different model or dtype; never loaded."""


def layout(state: Mapping[str, torch.Tensor], dtype: torch.dtype = torch.float32) -> tuple[list[Slot], int]:
    """Each tensor's place in the flat buffer (sorted by name), and a digest both sides compare."""
    slots, start = [], 0
    for name in sorted(state):
        shape = tuple(state[name].shape)
        numel = int(state[name].numel())
        slots.append(Slot(name=name, shape=shape, start=start, numel=numel))
        start += numel
    # The wire dtype too: a bf16 buffer read as fp32 would be the right length in bytes and nonsense.
    text = (f"{dtype};" + ";".join(f"{s.name}:{s.shape}" for s in slots)).encode()
    digest = int.from_bytes(hashlib.sha256(text).digest()[:8], "big") >> 1  # fits a signed int64
    return slots, digest


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


class WeightSync:
    """One member of the sync group: the trainer's sending rank (`src`) or a generator."""

    def __init__(
        self,
        template: Mapping[str, torch.Tensor],
        *,
        src: int,
        group: dist.ProcessGroup | None = None,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        """``template``: names and shapes only (meta tensors do); ``group``: a registered group, or None for
        the default one, used when a call passes no ``group=``."""
        self.slots, self.digest = layout(template, dtype)
        self.src, self.group, self.dtype = src, group, dtype
        total = sum(s.numel for s in self.slots)
        self.buffer = torch.empty(total, dtype=dtype, device=device)  # reused for every version
        self.header = torch.zeros(HEADER, dtype=torch.int64, device=device)

    def pack(self, state: Mapping[str, torch.Tensor], version: int) -> None:
        """Copy ``state`` into the buffer in layout order (cast to the wire dtype) and stamp the header."""
        names = {s.name for s in self.slots}
        if set(state) != names:
            missing, unknown = sorted(names - set(state))[:3], sorted(set(state) - names)[:3]
            raise LayoutError(
                f"version {version}: the state's names differ from the sync layout "
                f"(missing {missing}, unknown {unknown})"
            )
        with torch.no_grad():
            for slot in self.slots:
                self.buffer[slot.start : slot.start + slot.numel].copy_(state[slot.name].reshape(-1))
        self.header.copy_(torch.tensor([version, self.buffer.numel(), self.digest]))

    def check(self) -> int:
        """The version the header announces; LayoutError when the sender's layout is not this member's."""
        version, elements, digest = (int(v) for v in self.header.tolist())
        if (elements, digest) != (self.buffer.numel(), self.digest):
            raise LayoutError(
                f"version {version}: the sender's layout ({elements} elements, digest {digest:x}) is not this "
                f"member's ({self.buffer.numel()}, {self.digest:x}); start both from the same model config and dtype"
            )
        return version

    def unpack(self) -> dict[str, torch.Tensor]:
        """Named views into the buffer (no copy), valid until it is next written; copy them to keep."""
        return {s.name: self.buffer[s.start : s.start + s.numel].view(s.shape) for s in self.slots}

    def send(self, state: Mapping[str, torch.Tensor], version: int, group: Backend | None = None) -> None:
        """Broadcast `state` (a snapshot) as policy `version`; blocks until every member received it.

        ``group``: a standalone group (``open_group``) for this call instead of the constructor's (a sender
        serving generators pair by pair reuses one buffer for all of them).
        """
        self.pack(state, version)
        self._broadcast(self.header, group)
        self._broadcast(self.buffer, group)

    def receive(self, group: Backend | None = None) -> tuple[int, dict[str, torch.Tensor]]:
        """(version, state): ``unpack``'s views, valid until the next receive; copy them to keep."""
        self._broadcast(self.header, group)
        version = self.check()  # on a mismatch the buffer broadcast would not match: refuse before it
        self._broadcast(self.buffer, group)
        return version, self.unpack()

    def _broadcast(self, tensor: torch.Tensor, group: Backend | None) -> None:
        if group is None:
            dist.broadcast(tensor, self.src, group=self.group)
            return
        # A standalone group (open_group): its own broadcast, not dist.broadcast, which refuses it.
        options = dist.BroadcastOptions()
        options.rootRank = self.src
        group.broadcast([tensor], options).wait()  # type: ignore[attr-defined]  # stubs lack Backend.broadcast
