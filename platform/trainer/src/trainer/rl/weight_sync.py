"""Weight sync, trainer -> generators: one broadcast per version over a process group, stamped with the version.

Every member builds the same layout from the model's state dict (names sorted, shapes, one transfer
dtype), so the wire carries only numbers: a header (version, element count, layout digest) and one flat
buffer that each side allocates once and reuses for every version. The sender packs a snapshot taken
after the commit (generate.snapshot), never the live parameters the optimizer writes. gloo on CPU and
NCCL on GPU run this same code; the generators copy what they receive into their own memory
(Generator.load_weights), so the next version's broadcast cannot change weights a generation is using.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend

HEADER = 3  # version, elements, layout digest (63 bits)


@dataclass(frozen=True, kw_only=True)
class Slot:
    name: str
    shape: tuple[int, ...]
    start: int
    numel: int


class LayoutError(ValueError):
    """The two sides disagree on what is sent: a different model or dtype; never loaded."""


def layout(state: Mapping[str, torch.Tensor]) -> tuple[list[Slot], int]:
    """Each tensor's place in the flat buffer (sorted by name), and a digest both sides compare."""
    slots, start = [], 0
    for name in sorted(state):
        shape = tuple(state[name].shape)
        numel = int(state[name].numel())
        slots.append(Slot(name=name, shape=shape, start=start, numel=numel))
        start += numel
    text = ";".join(f"{s.name}:{s.shape}" for s in slots).encode()
    digest = int.from_bytes(hashlib.sha256(text).digest()[:8], "big") >> 1  # fits a signed int64
    return slots, digest


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
        self.slots, self.digest = layout(template)
        self.src, self.group, self.dtype = src, group, dtype
        total = sum(s.numel for s in self.slots)
        self.buffer = torch.empty(total, dtype=dtype, device=device)  # reused for every version
        self.header = torch.zeros(HEADER, dtype=torch.int64, device=device)

    def send(self, state: Mapping[str, torch.Tensor], version: int, group: Backend | None = None) -> None:
        """Broadcast `state` (a snapshot) as policy `version`; blocks until every member received it.

        ``group``: this call's group instead of the constructor's (a sender serving generators pair by pair
        reuses one buffer for all of them).
        """
        if set(state) != {s.name for s in self.slots}:
            raise LayoutError(f"version {version}: the state's names differ from the sync layout")
        with torch.no_grad():
            for slot in self.slots:
                self.buffer[slot.start : slot.start + slot.numel].copy_(state[slot.name].reshape(-1))
        self.header.copy_(torch.tensor([version, self.buffer.numel(), self.digest]))
        self._broadcast(self.header, group)
        self._broadcast(self.buffer, group)

    def _broadcast(self, tensor: torch.Tensor, group: Backend | None) -> None:
        if group is None:
            dist.broadcast(tensor, self.src, group=self.group)
            return
        # A group made outside torch.distributed's registry (pairs.py): its own broadcast, ranks its own.
        options = dist.BroadcastOptions()
        options.rootRank = self.src
        group.broadcast([tensor], options).wait()  # type: ignore[attr-defined]  # stubs lack Backend.broadcast

    def receive(self, group: Backend | None = None) -> tuple[int, dict[str, torch.Tensor]]:
        """(version, state): views into the reused buffer, valid until the next receive; copy them to keep."""
        self._broadcast(self.header, group)
        version, elements, digest = (int(v) for v in self.header.tolist())
        if (elements, digest) != (self.buffer.numel(), self.digest):
            # The buffer broadcast that follows would not match: drain nothing, refuse the group.
            raise LayoutError(
                f"version {version}: the sender's layout ({elements} elements, digest {digest:x}) is not this "
                f"generator's ({self.buffer.numel()}, {self.digest:x}); start both from the same model config"
            )
        self._broadcast(self.buffer, group)
        state = {s.name: self.buffer[s.start : s.start + s.numel].view(s.shape) for s in self.slots}
        return version, state
