"""Data-parallel gradient averaging across replica groups through the torchft Manager.

In a sharded group (FSDP2) each rank averages its local gradient shards (HSDP).

Gradients are flattened into buckets (one all-reduce each, all in flight at
once) and averaged over the groups in the quorum. torchft 0.2's DDP wrapper
asserts inside its comm hook when an all-reduce fails (its error path
returns a future without the underlying one), which kills the surviving
group; here a failure only marks the Manager as errored, so should_commit
says no, the step is retried, and training continues with the groups left.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from trainer.distributed.group import local

BUCKET_BYTES = 25 << 20  # as torch DDP: large enough to amortize latency, small enough to overlap


def buckets(grads: list[torch.Tensor], limit: int = BUCKET_BYTES) -> list[list[torch.Tensor]]:
    out: list[list[torch.Tensor]] = [[]]
    size = 0
    for grad in grads:
        nbytes = grad.numel() * grad.element_size()
        if out[-1] and size + nbytes > limit:
            out.append([])
            size = 0
        out[-1].append(grad)
        size += nbytes
    return [b for b in out if b]


def allreduce_gradients(manager: Any, parameters: Iterable[torch.nn.Parameter], limit: int = BUCKET_BYTES) -> None:
    # Sharded (FSDP2): each rank's local shard, averaged with the same rank's shard in the other groups.
    grads = [local(p.grad) for p in parameters if p.grad is not None]
    pending = []
    for bucket in buckets(grads, limit):
        flat = torch.cat([g.reshape(-1) for g in bucket])
        pending.append((manager.allreduce(flat), flat, bucket))
    for work, flat, bucket in pending:
        work.wait()
        offset = 0
        for grad in bucket:
            grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
            offset += grad.numel()
