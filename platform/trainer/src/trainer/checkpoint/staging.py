"""How DCP copies a state out of the training loop's way: the staging options and a stager whose errors are seen."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import torch
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions


def staging_options() -> StagingOptions:
    """Staging in DCP's own thread; pinned memory and non-blocking copies only exist with an accelerator.

    On a CPU host this is StagingOptions(False, False, True, False): DCP raises for non-blocking copies
    without an accelerator and ignores pinning without CUDA. Shared memory is only for DCP's
    process-based uploader; we upload from a thread. (Only the CPU branch has been run so far.)
    """
    accelerator = torch.accelerator.is_available()
    return StagingOptions(
        use_pinned_memory=accelerator,
        use_shared_memory=False,
        use_async_staging=True,
        use_non_blocking_copy=accelerator,
    )


class Stager(DefaultStager):
    """DefaultStager that hands out the future of its last stage() call.

    torch 2.13's async_save reports staging_completion as successful when staging has already
    failed by the time it looks; the stager's own future carries the error.
    """

    last: Future[Any] | None = None

    def stage(self, state_dict: dict[str, Any], **kwargs: Any) -> dict[str, Any] | Future[dict[str, Any]]:
        staged = super().stage(state_dict, **kwargs)
        self.last = staged if isinstance(staged, Future) else None
        return staged
