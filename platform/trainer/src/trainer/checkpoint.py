"""Staged, then durable, checkpoints with torch.distributed.checkpoint (DCP).

A checkpoint goes through two moments the training loop cares about:

* **staged**: DCP's stager has copied the state (tensors and plain objects) into
  its own buffers, so training may resume and change the originals in place;
* **durable**: DCP's background thread wrote the files and this module wrote
  ``COMMITTED`` next to them. Only then does ``latest()`` return the step.

Layout under ``root`` (a local path or any fsspec URL such as ``gs://bucket/run``)::

    step-000001000/.metadata, __0_0.distcp, ...   DCP files
    step-000001000/COMMITTED                      JSON manifest; written last

``COMMITTED`` is ``{"schema": 1, "step", "time", "bytes", "files": {name: {"size", "sha256"}}}``:
every file DCP wrote for the step, read back from storage after the upload. A checkpoint is only
trusted (``latest()``, ``load()``) when its marker parses and validates and every listed file is
there with that size and hash, and no other file is, and its pickles (``.metadata`` and every
non-tensor value) are what DCP writes (dcp_pickle.py: nothing else is unpickled, so a crafted folder
with a valid marker cannot run code). Anything else is skipped with a one-line reason.

A process that dies between the two moments leaves a directory without
``COMMITTED``: it is never loaded and is cleaned up by a later commit.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import math
import posixpath
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import Any, NoReturn

import fsspec  # type: ignore[import-untyped]
import torch
import torch.distributed as dist

# DCP's fsspec storage is not re-exported by torch.distributed.checkpoint in torch 2.13; it is what
# dcp.save picks itself for URLs, but only this way can fsspec storage options be passed to it.
from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import AsyncSaveResponse, async_save
from torch.distributed.tensor import DTensor

from trainer.dcp_pickle import SafePlanner, SafeReader, UnsafeCheckpoint, bytes_entries, load_plain, read_metadata

log = logging.getLogger(__name__)

MARKER = "COMMITTED"
SCHEMA = 1  # of the COMMITTED manifest; a marker without it (written before checksums) is not trusted
_STEP_DIR = re.compile(r"step-(\d+)")
# A file DCP writes: flat in the step directory, no separators, so a name can never leave it.
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}|\.metadata")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_MAX_MARKER_BYTES = 4 << 20  # ~30k files; a bigger marker is hostile, not read into memory
_MAX_FILES = 100_000
_MAX_SIZE = 1 << 50  # 1 PiB: any larger size or total is forged
_READ_CHUNK = 8 << 20


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read.

    DCP reports failures as CheckpointException, a BaseException that ``except Exception`` in a
    training loop would not catch; it is kept as ``__cause__`` (with every rank's traceback).
    """

    @classmethod
    def wrap(cls, what: str, error: CheckpointException) -> CheckpointError:
        causes = "; ".join(f"rank {rank}: {exc!r}" for rank, (exc, _) in error.failures.items())
        return cls(f"{what}: {causes}")


class InvalidCheckpoint(ValueError):
    """A committed checkpoint that must not be loaded; ``str()`` is the one-line reason."""


@dataclass(frozen=True)
class FileDigest:
    size: int
    sha256: str


def parse_marker(raw: bytes, step: int) -> dict[str, FileDigest]:
    """The files a ``COMMITTED`` marker of ``step`` lists, after validating every field.

    Pure: raises InvalidCheckpoint (one line) for anything but a well-formed manifest of this step.
    """
    if len(raw) > _MAX_MARKER_BYTES:
        _invalid(f"marker is {len(raw)} bytes (at most {_MAX_MARKER_BYTES})")
    try:
        record = json.loads(raw, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constant)
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        _invalid(f"marker is not JSON: {str(error).splitlines()[0][:200]}")
    if not isinstance(record, dict):
        _invalid("marker is not a JSON object")
    schema = record.get("schema")
    if schema != SCHEMA or isinstance(schema, bool):
        _invalid(f"marker schema is {_short(schema)}, expected {SCHEMA} (written before checksums, or forged)")
    if _whole(record.get("step"), 0, 10**12) != step:
        _invalid(f"marker step {_short(record.get('step'))} is not the directory's step {step}")
    when = record.get("time")
    if isinstance(when, bool) or not isinstance(when, int | float) or not math.isfinite(when) or when < 0:
        _invalid(f"marker time {_short(when)} is not a timestamp")
    files = record.get("files")
    if not isinstance(files, dict) or not files:
        _invalid("marker lists no files")
    if len(files) > _MAX_FILES:
        _invalid(f"marker lists {len(files)} files (at most {_MAX_FILES})")
    digests: dict[str, FileDigest] = {}
    for name, entry in files.items():
        if not _FILE_NAME.fullmatch(name) or name in (".", "..", MARKER):
            _invalid(f"marker lists the file name {_short(name)}, which is not a file of this directory")
        if not isinstance(entry, dict) or set(entry) != {"size", "sha256"}:
            _invalid(f"marker entry of {name} is not {{size, sha256}}")
        size = _whole(entry["size"], 0, _MAX_SIZE)
        digest = entry["sha256"]
        if size is None or not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            _invalid(f"marker entry of {name} has a bad size or sha256")
        digests[name] = FileDigest(size, digest)
    if ".metadata" not in digests:
        _invalid("marker does not list DCP's .metadata")
    total = _whole(record.get("bytes"), 0, _MAX_SIZE * _MAX_FILES)
    if total != sum(d.size for d in digests.values()):
        _invalid(f"marker bytes {_short(record.get('bytes'))} is not the sum of the file sizes")
    return digests


def _whole(value: Any, low: int, high: int) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    return value if ok else None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _invalid(reason: str) -> NoReturn:
    raise InvalidCheckpoint(reason)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate key")  # two values for one field: which one would be believed?
    return dict(pairs)


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


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
        self._verified: dict[int, bytes] = {}  # step -> the marker it verified with
        self._inflight: Future[None] | None = None
        self._closed = False

    # -- the training loop's calls ------------------------------------------------------------

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
        return self._committed_steps()

    def has_step_data(self) -> bool:
        """Whether any step directory exists (committed or not)."""
        return bool(self._step_dirs())

    def verify(self, step: int) -> str | None:
        """None when committed ``step`` can be trusted, else the one-line reason it cannot.

        Reads every file of the step back (the cost of one more read of the checkpoint). A step that
        verified is remembered by its marker's bytes, so ``latest()`` then ``load()`` read it once.
        """
        try:
            raw = self._read_marker(step)
            if self._verified.get(step) == raw:
                return None
            expected = parse_marker(raw, step)
            present = self._listing(step)
            missing = sorted(set(expected) - set(present))
            unlisted = sorted(set(present) - set(expected))
            if missing:
                _invalid(f"{missing[0]} is missing" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
            if unlisted:
                _invalid(f"{_short(unlisted[0])} is not listed in the marker")
            for name, digest in sorted(expected.items()):
                if present[name] != digest.size:
                    _invalid(f"{name} has {present[name]} bytes, the marker says {digest.size}")
                if self._digest(f"{self._step_path(step)}/{name}").sha256 != digest.sha256:
                    _invalid(f"{name} does not match its sha256 (flipped or rewritten bytes)")
            self._check_pickles(step, present)
        except (InvalidCheckpoint, UnsafeCheckpoint) as error:
            return str(error)
        except OSError as error:  # e.g. the marker vanished or storage refused a read: not trusted now
            return (
                f"could not be read: {type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
            )
        self._verified[step] = raw
        return None

    def load(self, step: int, state: dict[str, Any]) -> None:
        """Load committed ``step`` in place into ``state``, after verifying it (CheckpointError if it fails).

        ``state`` must have the saved structure: tensors of the saved shapes are filled in place,
        other values (ints, pickled objects) are replaced. Keys missing from ``state`` are not loaded,
        so e.g. an optimizer must already have its state (take one step first).
        """
        if not self._fs.exists(self._marker(step)):
            raise FileNotFoundError(f"no committed checkpoint for step {step} under {self._url}")
        reason = self.verify(step)
        if reason is not None:
            raise CheckpointError(f"step {step} under {self._url} does not verify: {reason}")
        try:
            dcp_load(
                state,
                storage_reader=SafeReader(self._step_url(step), **self._options),
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
        names = sorted(self._listing(step))
        files = {name: self._digest(f"{self._step_path(step)}/{name}") for name in names}
        record = {
            "schema": SCHEMA,
            "step": step,
            "time": time.time(),
            "bytes": sum(d.size for d in files.values()),
            "files": {name: {"size": d.size, "sha256": d.sha256} for name, d in files.items()},
        }
        raw = json.dumps(record, sort_keys=True).encode()
        with self._fs.open(self._marker(step), "wb") as marker:
            marker.write(raw)
        self._verified[step] = raw  # by construction
        # Its existence is what counts: DCP fsynced the data files (locally) before we got here.

    def _check_pickles(self, step: int, present: dict[str, int]) -> None:
        """UnsafeCheckpoint unless ``.metadata`` and every non-tensor value unpickle as plain DCP data.

        The same restricted readers as ``load()``, so a crafted step is skipped here with its reason
        instead of failing the load. Reads only the non-tensor slices: small (hyperparameters, RNG states).
        """
        root = self._step_path(step)
        with self._fs.open(f"{root}/.metadata", "rb") as stream:
            metadata = read_metadata(stream)
        for name, info in bytes_entries(metadata):
            if info.relative_path not in present or info.offset + info.length > present[info.relative_path]:
                raise UnsafeCheckpoint(f".metadata: {name[:80]} lies outside the files of the step")
            with self._fs.open(f"{root}/{info.relative_path}", "rb") as data:
                data.seek(info.offset)
                load_plain(io.BytesIO(data.read(info.length)), name)

    def _read_marker(self, step: int) -> bytes:
        with self._fs.open(self._marker(step), "rb") as marker:
            raw: bytes = marker.read(_MAX_MARKER_BYTES + 1)
        return raw

    def _listing(self, step: int) -> dict[str, int]:
        """Files of a step directory (relative name -> size), the marker left out."""
        root = self._step_path(step)
        self._fs.invalidate_cache(root)
        found: dict[str, Any] = self._fs.find(root, detail=True)
        files = {}
        for path, info in found.items():
            name = posixpath.relpath(path, root) if path.startswith(root + "/") else path
            if name != MARKER:
                files[name] = int(info.get("size") or 0)
        return files

    def _digest(self, path: str) -> FileDigest:
        digest, size = hashlib.sha256(), 0
        with self._fs.open(path, "rb") as f:
            while chunk := f.read(_READ_CHUNK):
                digest.update(chunk)
                size += len(chunk)
        return FileDigest(size, digest.hexdigest())

    def _prune(self, committed_now: int) -> None:
        """Keep the newest ``keep`` committed steps up to the one just committed; drop older ones and leftovers.

        The step just committed is verified by construction and always kept. Committed steps newer
        than it are left alone and not counted: they are from before a resume to an older step (so
        they did not verify, or this group's history forked), and counting them could delete the
        verified ones while keeping only those.
        """
        try:
            committed = [s for s in self._committed_steps() if s <= committed_now]
            keep = set(committed[-self._keep :]) | {committed_now}
            for step in self._step_dirs():
                if step not in keep and step < committed_now:
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
