"""Whether a state is fit to checkpoint: the floating-point tensors that hold a NaN or an infinity."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.distributed.tensor import DTensor


def nonfinite_tensors(state: Any, where: str = "") -> list[str]:
    """Paths of the floating-point tensors in ``state`` that hold a NaN or an infinity.

    A DTensor is checked by this rank's local shard: on the DTensor itself each reduction is a collective
    over its mesh (six all-reduces per tensor, ~0.6 s per checkpoint for the tiny model on a 2-rank CPU
    group); ``Checkpointer.save`` agrees on the outcome with the group in one all-reduce instead. The
    per-tensor verdicts are read back in one transfer per device, not one host sync per tensor.
    """
    found = list(_float_tensors(state, where))
    verdicts: dict[int, bool] = {}
    for device in {t.device for _, t in found}:
        on_device = [(i, t) for i, (_, t) in enumerate(found) if t.device == device]
        finite = torch.stack([_all_finite(t) for _, t in on_device]).tolist()
        verdicts.update((i, ok) for (i, _), ok in zip(on_device, finite, strict=True))
    return [path for i, (path, _) in enumerate(found) if not verdicts[i]]


def _float_tensors(state: Any, where: str) -> Iterator[tuple[str, torch.Tensor]]:
    """(path, local tensor) of every non-empty floating-point or complex tensor in ``state``."""
    if isinstance(state, torch.Tensor):
        value = state.to_local() if isinstance(state, DTensor) else state
        if (value.is_floating_point() or value.is_complex()) and value.numel() > 0:
            yield where or "state", value.detach()
    elif isinstance(state, dict):
        for k, v in state.items():
            yield from _float_tensors(v, f"{where}.{k}" if where else str(k))
    elif isinstance(state, list | tuple):
        for i, v in enumerate(state):
            yield from _float_tensors(v, f"{where}[{i}]")


def _all_finite(value: torch.Tensor) -> torch.Tensor:
    values = torch.view_as_real(value) if value.is_complex() else value
    low, high = torch.aminmax(values)  # one pass; NaN propagates, +-inf shows at the ends
    return torch.isfinite(low) & torch.isfinite(high)
