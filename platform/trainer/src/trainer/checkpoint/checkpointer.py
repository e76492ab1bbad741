"""The Checkpointer: asynchronous DCP saves with a commit marker, at most one in flight, on its own cadence.

A checkpoint goes through two moments the training loop cares about:

* **staged**: DCP's stager has copied the state (tensors and plain objects) into
  its own buffers, so training may resume and change the originals in place;
* **durable**: DCP's background thread wrote the files and this module wrote
  ``COMMITTED`` next to them (manifest.py). Only then does ``latest()`` return the step.

A process that dies between the two moments leaves a directory without
``COMMITTED``: it is never loaded and is cleaned up by a later commit.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torch.distributed.checkpoint.staging import StagingOptions
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import AsyncSaveResponse, async_save

from trainer.checkpoint.dcp_pickle import SafePlanner, read_metadata
from trainer.checkpoint.finite import nonfinite_tensors
from trainer.checkpoint.manifest import encode_marker
from trainer.checkpoint.staging import Stager, staging_options
from trainer.checkpoint.store import StepStore
from trainer.checkpoint.verify import unreadable, why_untrusted

log = logging.getLogger(__name__)


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


class Checkpointer:
    """Asynchronous DCP checkpoints with at most one in flight and a commit marker.

    ``process_group``: the replica group's process group (torch.distributed must be initialized and
    the group must have a CPU backend, e.g. gloo, because DCP plans and commits over it from its
    background thread); rank 0 of the group writes the marker and prunes. ``None``: this process
    saves alone, whether or not torch.distributed is initialized.

    ``every``: the cadence ``maybe_save`` keeps, in the caller's steps (the training loop's committed
    steps); ``save`` saves whenever it is called.

    ``staging`` and ``write_threads`` are tuning knobs (see scripts/bench_trainer.py); the defaults
    suit a CPU or a single-accelerator process.

    Call it from one thread (the training loop).
    """

    def __init__(
        self,
        root: str,
        *,
        keep: int = 3,
        every: int = 1,
        storage_options: dict[str, Any] | None = None,
        on_event: Callable[[CheckpointEvent], None] | None = None,
        process_group: Any = None,
        staging: StagingOptions | None = None,
        write_threads: int = 1,
    ) -> None:
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        if every < 1:
            raise ValueError(f"every must be at least 1, got {every}")
        self._store = StepStore(root, storage_options)
        self._url = self._store.url
        self._keep, self._every = keep, every
        self._on_event = on_event
        self._pg = process_group
        # The stager keeps its copy buffers between saves (keyed by the source tensors' storage) and
        # refills them in place, which is only safe because the previous upload has finished by then.
        self._stager = Stager(staging or staging_options())
        self._write_threads = write_threads
        self._committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-commit")
        self._verified: dict[int, bytes] = {}  # step -> the marker it verified with
        self._inflight: Future[None] | None = None
        self._closed = False

    # -- the training loop's calls ------------------------------------------------------------

    def should_save(self, step: int) -> bool:
        """Whether ``step`` is one the cadence checkpoints."""
        return step % self._every == 0

    def maybe_save(self, step: int, state: Callable[[], dict[str, Any]]) -> float:
        """``save(step, state())`` when the cadence says so; the seconds the caller was blocked (0 if not)."""
        return self.save(step, state()) if self.should_save(step) else 0.0

    def save(self, step: int, state: dict[str, Any]) -> float:
        """Start an async checkpoint of ``state`` at ``step``; return the seconds the caller was blocked.

        Blocks for the previous checkpoint to become durable (re-raising its error), then until this
        one is staged. "durable" is emitted later from a background thread. A state holding a NaN or
        an infinity is refused (CheckpointError) before anything is written: a checkpoint that would
        verify but resume training on garbage is worse than none.
        """
        start = time.monotonic()
        if self._closed:
            raise RuntimeError("Checkpointer is closed")
        self.wait()
        coordinator = self._is_coordinator()  # first: it explains a group without torch.distributed
        self._refuse_nonfinite(step, state)
        if coordinator:
            # Saving a step again (e.g. after resuming from it) must not leave its old marker up
            # while the new files are being written over the old ones.
            self._store.remove_marker(step)
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

    def _refuse_nonfinite(self, step: int, state: dict[str, Any]) -> None:
        """CheckpointError on every rank of the group when any rank's part of ``state`` is not finite.

        Each rank checks its own shards; one all-reduce of the counts makes the ranks agree, so none goes
        on into DCP's collective planning without the others. It runs on the training thread while no save
        is in flight (``wait()`` came first), so nothing else is using the checkpoint group.
        """
        bad = nonfinite_tensors(state)
        total = len(bad)
        if self._pg is not None:
            count = torch.tensor([total], dtype=torch.int64)
            dist.all_reduce(count, group=self._pg)
            total = int(count.item())
        if bad:
            more = f" and {len(bad) - 1} more" if len(bad) > 1 else ""
            raise CheckpointError(f"refusing to checkpoint step {step}: non-finite values in {bad[0]}{more}")
        if total:
            raise CheckpointError(
                f"refusing to checkpoint step {step}: non-finite values in {total} tensor(s) on another rank of the group"
            )

    def _start(self, step: int, state: dict[str, Any]) -> tuple[Future[Any], Future[Any]]:
        """Hand ``state`` to DCP; return the futures (staged, uploaded)."""
        self._stager.last = None
        response = async_save(
            state,
            storage_writer=self._store.writer(step, self._write_threads),
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

    def latest(self, on_skip: Callable[[int, str], None] | None = None) -> int | None:
        """Newest step that verifies; staged-only, partial and corrupt checkpoints never count.

        ``on_skip(step, reason)`` hears about every newer committed step that failed verification.
        """
        for step in reversed(self.committed()):
            reason = self.verify(step)
            if reason is None:
                return step
            if on_skip is not None:
                on_skip(step, reason)
        return None

    def committed(self) -> list[int]:
        """Steps with a commit marker, oldest first, verified or not."""
        return self._store.committed_steps()

    def verify(self, step: int) -> str | None:
        """None when committed ``step`` can be trusted, else the one-line reason it cannot (verify.py).

        A step that verified is remembered by its marker's bytes, so ``latest()`` then ``load()`` read it once.
        """
        try:
            raw = self._store.read_marker(step)
        except OSError as error:  # e.g. the marker vanished: not trusted now
            return unreadable(error)
        if self._verified.get(step) == raw:
            return None
        reason = why_untrusted(self._store, step, raw)
        if reason is None:
            self._verified[step] = raw
        return reason

    def tensors(self, step: int) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """Each tensor of committed ``step``: its name as DCP flattened it (``model.embed.weight``), whole shape and dtype.

        Read from ``.metadata`` by the restricted unpickler (dcp_pickle.py); call it after ``verify``.
        """
        with self._store.open(step, ".metadata") as stream:
            entries = read_metadata(stream).state_dict_metadata
        return {
            k: (tuple(v.size), v.properties.dtype) for k, v in entries.items() if isinstance(v, TensorStorageMetadata)
        }

    def load(self, step: int, state: dict[str, Any]) -> None:
        """Load committed ``step`` in place into ``state``, after verifying it (CheckpointError if it fails).

        ``state`` must have the saved structure: tensors of the saved shapes are filled in place,
        other values (ints, pickled objects) are replaced. Keys missing from ``state`` are not loaded,
        so e.g. an optimizer must already have its state (take one step first).
        """
        if not self._store.has_marker(step):
            raise FileNotFoundError(f"no committed checkpoint for step {step} under {self._url}")
        reason = self.verify(step)
        if reason is not None:
            raise CheckpointError(f"step {step} under {self._url} does not verify: {reason}")
        try:
            dcp_load(
                state,
                storage_reader=self._store.reader(step),
                planner=SafePlanner(),  # as the default, but never weights_only=False
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
        # Hashes of what storage holds now (read back, not what we meant to write), so a later load
        # detects any change since; the cost is one read of the checkpoint in this background thread.
        files = {name: self._store.digest(step, name) for name in sorted(self._store.listing(step))}
        raw = encode_marker(step, files)
        self._store.write_marker(step, raw)
        self._verified[step] = raw  # by construction
        # Its existence is what counts: DCP fsynced the data files (locally) before we got here.

    def _prune(self, committed_now: int) -> None:
        """Keep the newest ``keep`` committed steps up to the one just committed; drop older ones and leftovers.

        The step just committed is verified by construction and always kept. Committed steps newer
        than it are left alone and not counted: they are from before a resume to an older step (so
        they did not verify, or this group's history forked), and counting them could delete the
        verified ones while keeping only those.
        """
        try:
            committed = [s for s in self._store.committed_steps() if s <= committed_now]
            keep = set(committed[-self._keep :]) | {committed_now}
            for step in self._store.step_dirs():
                if step not in keep and step < committed_now:
                    self._store.remove(step)
        except Exception:
            # The checkpoint is durable; a failed clean-up is retried after the next commit.
            log.warning("could not prune old checkpoints under %s", self._url, exc_info=True)

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
