"""Staged, then durable, checkpoints with torch.distributed.checkpoint (DCP).

A checkpoint goes through two moments the training loop cares about:

* **staged**: DCP's stager has copied the state (tensors and plain objects) into
  its own buffers, so training may resume and change the originals in place;
* **durable**: DCP's background thread wrote the files and this module wrote
  ``COMMITTED`` next to them. Only then does ``latest()`` return the step.

Layout under ``root`` (a local path or any fsspec URL such as ``gs://bucket/run``)::

    step-000001000/.metadata, __0_0.distcp, ...   DCP files
    step-000001000/COMMITTED                      JSON {step, time, bytes}; written last

A process that dies between the two moments leaves a directory without
``COMMITTED``: it is never loaded and is cleaned up by a later commit.
"""

from __future__ import annotations

import contextlib
import json
import logging
import posixpath
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import fsspec  # type: ignore[import-untyped]
import torch
import torch.distributed as dist

# DCP's fsspec storage is not re-exported by torch.distributed.checkpoint in torch 2.13; it is what
# dcp.save picks itself for URLs, but only this way can fsspec storage options be passed to it.
from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import AsyncSaveResponse, async_save

log = logging.getLogger(__name__)

MARKER = "COMMITTED"
_STEP_DIR = re.compile(r"step-(\d+)")


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read.

    DCP reports failures as CheckpointException, a BaseException that ``except Exception`` in a
    training loop would not catch; it is kept as ``__cause__`` (with every rank's traceback).
    """

    @classmethod
    def wrap(cls, what: str, error: CheckpointException) -> CheckpointError:
        causes = "; ".join(f"rank {rank}: {exc!r}" for rank, (exc, _) in error.failures.items())
        return cls(f"{what}: {causes}")


@dataclass(frozen=True)
class CheckpointEvent:
    kind: str  # "staged" (state captured, training may resume) or "durable" (written + committed)
    step: int
    seconds: float  # time from save() being called to this event


def step_dir(step: int) -> str:
    return f"step-{step:09d}"


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


class _Stager(DefaultStager):
    """DefaultStager that hands out the future of its last stage() call.

    torch 2.13's async_save reports staging_completion as successful when staging has already
    failed by the time it looks; the stager's own future carries the error.
    """

    last: Future[Any] | None = None

    def stage(self, state_dict: dict[str, Any], **kwargs: Any) -> dict[str, Any] | Future[dict[str, Any]]:
        staged = super().stage(state_dict, **kwargs)
        self.last = staged if isinstance(staged, Future) else None
        return staged


class Checkpointer:
    """Asynchronous DCP checkpoints with at most one in flight and a commit marker.

    ``process_group``: the replica group's process group (torch.distributed must be initialized and
    the group must have a CPU backend, e.g. gloo, because DCP plans and commits over it from its
    background thread); rank 0 of the group writes the marker and prunes. ``None``: this process
    saves alone, whether or not torch.distributed is initialized.

    ``staging`` and ``write_threads`` are tuning knobs (see scripts/bench_trainer.py); the defaults
    suit a CPU or a single-accelerator process.

    Call it from one thread (the training loop).
    """

    def __init__(
        self,
        root: str,
        *,
        keep: int = 3,
        storage_options: dict[str, Any] | None = None,
        on_event: Callable[[CheckpointEvent], None] | None = None,
        process_group: Any = None,
        staging: StagingOptions | None = None,
        write_threads: int = 1,
    ) -> None:
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        self._options = dict(storage_options or {})
        self._fs, path = fsspec.core.url_to_fs(root, **self._options)
        self._path: str = path.rstrip("/")
        # DCP gets a URL (it resolves the filesystem itself); a local path is made absolute once.
        self._url = self._path if self._is_local() else root.rstrip("/")
        self._keep = keep
        self._on_event = on_event
        self._pg = process_group
        # The stager keeps its copy buffers between saves (keyed by the source tensors' storage) and
        # refills them in place, which is only safe because the previous upload has finished by then.
        self._stager = _Stager(staging or staging_options())
        self._write_threads = write_threads
        self._committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-commit")
        self._inflight: Future[None] | None = None
        self._closed = False

    # -- the training loop's calls ------------------------------------------------------------

    def save(self, step: int, state: dict[str, Any]) -> float:
        """Start an async checkpoint of ``state`` at ``step``; return the seconds the caller was blocked.

        Blocks for the previous checkpoint to become durable (re-raising its error), then until this
        one is staged. "durable" is emitted later from a background thread.
        """
        start = time.monotonic()
        if self._closed:
            raise RuntimeError("Checkpointer is closed")
        self.wait()
        if self._is_coordinator():
            # Saving a step again (e.g. after resuming from it) must not leave its old marker up
            # while the new files are being written over the old ones.
            self._rm_quietly(self._marker(step))
        staged, upload = self._start(step, state)
        announced = threading.Event()
        commit = self._committer.submit(self._commit, step, start, upload, announced)
        self._inflight = commit
        try:
            staged.result()
        except BaseException:
            # The upload fails with the same error (it waits on the staged copy): report it once, here.
            announced.set()
            self._inflight = None
            with contextlib.suppress(Exception):
                commit.result()
            raise
        try:
            blocked = time.monotonic() - start
            self._emit("staged", step, blocked)
        finally:
            announced.set()
        return blocked

    def _start(self, step: int, state: dict[str, Any]) -> tuple[Future[Any], Future[Any]]:
        """Hand ``state`` to DCP; return the futures (staged, uploaded)."""
        self._stager.last = None
        response = async_save(
            state,
            storage_writer=self._writer(step),
            async_stager=self._stager,
            process_group=self._pg,
            no_dist=self._pg is None,
        )
        staged: Future[Any] | None = self._stager.last
        if staged is None:  # staging in the caller's thread (use_async_staging=False): already done
            staged = Future()
            staged.set_result(None)
        upload = response.upload_completion if isinstance(response, AsyncSaveResponse) else response
        return staged, upload

    def wait(self) -> None:
        """Block until the in-flight checkpoint (if any) is durable; re-raise its error (once)."""
        inflight, self._inflight = self._inflight, None
        if inflight is not None:
            inflight.result()

    def latest(self) -> int | None:
        """Newest step with a commit marker; staged-only and partial checkpoints never count."""
        committed = self._committed_steps()
        return committed[-1] if committed else None

    def load(self, step: int, state: dict[str, Any]) -> None:
        """Load committed ``step`` in place into ``state``.

        ``state`` must have the saved structure: tensors of the saved shapes are filled in place,
        other values (ints, pickled objects) are replaced. Keys missing from ``state`` are not loaded,
        so e.g. an optimizer must already have its state (take one step first).
        """
        if not self._fs.exists(self._marker(step)):
            raise FileNotFoundError(f"no committed checkpoint for step {step} under {self._url}")
        try:
            dcp_load(
                state,
                storage_reader=FsspecReader(self._step_url(step), **self._options),
                process_group=self._pg,
                no_dist=self._pg is None,
            )
        except CheckpointException as e:
            raise CheckpointError.wrap(f"loading step {step} from {self._url} failed", e) from e

    def close(self) -> None:
        """Wait for the in-flight checkpoint (re-raising its error) and release the staging buffers."""
        if self._closed:
            return
        self._closed = True
        try:
            self.wait()
        finally:
            self._committer.shutdown(wait=True)
            self._stager.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- background commit ----------------------------------------------------------------------

    def _commit(self, step: int, start: float, upload: Future[Any], announced: threading.Event) -> None:
        try:
            upload.result()  # the write's error fails the commit: no marker
        except CheckpointException as e:
            raise CheckpointError.wrap(f"writing step {step} to {self._url} failed", e) from e
        announced.wait()  # "staged" is always reported before "durable"
        coordinator = self._is_coordinator()
        if coordinator:
            # Rank 0's upload only completes after every rank's files and .metadata are written.
            self._write_marker(step)
        self._emit("durable", step, time.monotonic() - start)
        if coordinator:
            self._prune(step)

    def _write_marker(self, step: int) -> None:
        record = {"step": step, "time": time.time(), "bytes": self._fs.du(self._step_path(step))}
        with self._fs.open(self._marker(step), "wb") as marker:
            marker.write(json.dumps(record).encode())
        # Its existence is what counts: DCP fsynced the data files (locally) before we got here.

    def _prune(self, committed_now: int) -> None:
        """Keep the newest ``keep`` committed steps; drop older ones and leftovers older than the newest commit."""
        try:
            committed = self._committed_steps()
            keep = set(committed[-self._keep :]) | {committed_now}
            newest = max(committed, default=committed_now)
            for step in self._step_dirs():
                if step not in keep and (step in committed or step < newest):
                    self._remove(step)
        except Exception:
            # The checkpoint is durable; a failed clean-up is retried after the next commit.
            log.warning("could not prune old checkpoints under %s", self._url, exc_info=True)

    def _remove(self, step: int) -> None:
        self._rm_quietly(self._marker(step))  # first, so a half-deleted directory is never "committed"
        self._fs.rm(self._step_path(step), recursive=True)

    # -- storage layout -------------------------------------------------------------------------

    def _committed_steps(self) -> list[int]:
        self._fs.invalidate_cache(self._path)  # other processes may have committed since we last listed
        markers = self._fs.glob(f"{self._path}/step-*/{MARKER}")
        return sorted(s for m in markers if (s := _parse_step(posixpath.dirname(m))) is not None)

    def _step_dirs(self) -> list[int]:
        self._fs.invalidate_cache(self._path)
        return sorted(s for p in self._fs.glob(f"{self._path}/step-*") if (s := _parse_step(p)) is not None)

    def _writer(self, step: int) -> FsspecWriter:
        # fsync only means something on a local disk; for other filesystems DCP would fall back to
        # os.sync() of the whole host, while an object store commits a file when it is closed.
        return FsspecWriter(
            self._step_url(step), sync_files=self._is_local(), thread_count=self._write_threads, **self._options
        )

    def _step_url(self, step: int) -> str:
        return f"{self._url}/{step_dir(step)}"

    def _step_path(self, step: int) -> str:
        return f"{self._path}/{step_dir(step)}"

    def _marker(self, step: int) -> str:
        return f"{self._step_path(step)}/{MARKER}"

    def _rm_quietly(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._fs.rm(path)

    def _is_local(self) -> bool:
        protocol = self._fs.protocol
        return "file" in ((protocol,) if isinstance(protocol, str) else protocol)

    def _is_coordinator(self) -> bool:
        if self._pg is None:
            return True
        if not dist.is_initialized():
            # DCP silently ignores the group then, and every rank would write as rank 0.
            raise RuntimeError("process_group given but torch.distributed is not initialized")
        return dist.get_rank(self._pg) == 0

    def _emit(self, kind: str, step: int, seconds: float) -> None:
        if self._on_event is not None:
            self._on_event(CheckpointEvent(kind, step, seconds))


def _parse_step(path: str) -> int | None:
    match = _STEP_DIR.fullmatch(posixpath.basename(path.rstrip("/")))
    return int(match.group(1)) if match else None
