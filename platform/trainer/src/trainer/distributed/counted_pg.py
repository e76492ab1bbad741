"""torchft process groups that count the bytes handed to all-reduce, and can emulate a slow link.

Subclasses of torchft's public process groups (and of the ring over the run's mTLS, distributed/tls_pg.py), given to the Manager as its ``pg``: every all-reduce is
counted, the trainer's gradient buckets and DiLoCo's pseudo-gradients alike, without wrapping or
patching the Manager. An all-reduce the Manager skips after an error is not counted (nothing is sent).

With ``ft.link_rtt_ms`` or ``ft.link_gbps`` set, each all-reduce also completes no earlier than the
link model (``distributed/link.py``) says it would over such a link: its work's ``wait`` (and future) hold it back
until then. The collective itself still runs at local speed; only its completion moves. So whatever
torchft overlaps with communication (streaming DiLoCo's ``fragment_sync_delay``) overlaps the emulated
delay too, and whatever it waits for, waits.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torchft.process_group import ProcessGroupBabyNCCL, ProcessGroupGloo

from trainer.distributed.link import Link
from trainer.distributed.tls_pg import TlsRingProcessGroup


def _nbytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class LinkWork(dist.Work):  # the base of every collective's work, as torchft's own
    """A collective's work that completes at ``deadline`` (time.monotonic) at the earliest."""

    def __init__(self, inner: Any, deadline: float) -> None:
        super().__init__()
        self.inner, self.deadline = inner, deadline

    def _hold(self) -> None:
        remaining = self.deadline - time.monotonic()
        if remaining > 0:
            time.sleep(remaining)

    def wait(self, timeout: timedelta | None = None) -> bool:
        done = bool(self.inner.wait() if timeout is None else self.inner.wait(timeout))
        self._hold()
        return done

    def block_current_stream(self, timeout: timedelta | None = None) -> None:
        self._hold()
        self.inner.block_current_stream()

    def is_completed(self) -> bool:
        return bool(self.inner.is_completed()) and time.monotonic() >= self.deadline

    def get_future(self) -> torch.futures.Future[Any]:
        inner: torch.futures.Future[Any] = self.inner.get_future()
        if time.monotonic() >= self.deadline:
            return inner
        held: torch.futures.Future[Any] = torch.futures.Future()

        def finish(done: torch.futures.Future[Any]) -> None:
            try:
                value = done.value()
            except Exception as error:  # the collective failed: so does the held future
                held.set_exception(error)
                return
            timer = threading.Timer(max(0.0, self.deadline - time.monotonic()), held.set_result, (value,))
            timer.daemon = True
            timer.start()

        inner.add_done_callback(finish)
        return held


class _Counted:
    """Counts bytes handed to all-reduce; with a link set, holds each one back as the link model says."""

    bytes_sent = 0
    link = Link(0.0, 0.0)

    def allreduce(self, tensors: list[torch.Tensor], opts: object) -> Any:
        nbytes = _nbytes(tensors)
        self.bytes_sent += nbytes
        work = super().allreduce(tensors, opts)  # type: ignore[misc]
        if not self.link.enabled:
            return work
        groups = int(self.size())  # type: ignore[attr-defined]  # the quorum's participants
        return LinkWork(work, self.link.schedule(time.monotonic(), nbytes, groups))


class CountedGloo(_Counted, ProcessGroupGloo):  # type: ignore[misc]  # torchft has no type information
    pass


class CountedBabyNCCL(_Counted, ProcessGroupBabyNCCL):  # type: ignore[misc]
    pass


class CountedTlsRing(_Counted, TlsRingProcessGroup):  # a run with a TLS identity: the ring over its mTLS
    pass


def counted_process_group(
    device: str, timeout: timedelta, rtt_ms: float = 0.0, gbps: float = 0.0
) -> CountedGloo | CountedBabyNCCL:
    pg = CountedBabyNCCL(timeout=timeout) if device == "cuda" else CountedGloo(timeout=timeout)
    pg.link = Link(rtt_ms, gbps)
    return pg
