"""torchft process groups that count the bytes handed to all-reduce: what a step costs in communication.

Subclasses of torchft's public process groups, given to the Manager as its ``pg``: every all-reduce is
counted, the trainer's gradient buckets and DiLoCo's pseudo-gradients alike, without wrapping or
patching the Manager. An all-reduce the Manager skips after an error is not counted (nothing is sent).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch
from torchft.process_group import ProcessGroupBabyNCCL, ProcessGroupGloo


def _nbytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class CountedGloo(ProcessGroupGloo):  # type: ignore[misc]  # torchft has no type information
    bytes_sent = 0

    def allreduce(self, tensors: list[torch.Tensor], opts: object) -> Any:
        self.bytes_sent += _nbytes(tensors)
        return super().allreduce(tensors, opts)


class CountedBabyNCCL(ProcessGroupBabyNCCL):  # type: ignore[misc]
    bytes_sent = 0

    def allreduce(self, tensors: list[torch.Tensor], opts: object) -> Any:
        self.bytes_sent += _nbytes(tensors)
        return super().allreduce(tensors, opts)


def counted_process_group(device: str, timeout: timedelta) -> CountedGloo | CountedBabyNCCL:
    return CountedBabyNCCL(timeout=timeout) if device == "cuda" else CountedGloo(timeout=timeout)
