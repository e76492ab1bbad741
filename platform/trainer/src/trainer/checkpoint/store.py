"""One checkpoint root on storage: its step directories, their files and markers.

Layout under the root (a local path or any fsspec URL such as ``gs://bucket/run``)::

    step-000001000/.metadata, __0_0.distcp, ...   DCP files
    step-000001000/COMMITTED                      JSON manifest (manifest.py); written last
"""

from __future__ import annotations

import contextlib
import hashlib
import posixpath
import re
from typing import IO, TYPE_CHECKING, Any

import fsspec  # type: ignore[import-untyped]

from trainer.checkpoint.manifest import MARKER, MAX_MARKER_BYTES, FileDigest

if TYPE_CHECKING:  # torch's DCP is imported where a step is written or read: listing steps needs no torch
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

    from trainer.checkpoint.dcp_pickle import SafeReader

_STEP_DIR = re.compile(r"step-(\d+)")
_READ_CHUNK = 8 << 20


def step_dir(step: int) -> str:
    return f"step-{step:09d}"


class StepStore:
    """The step directories under ``root``; every listing is fresh (other processes commit and prune too)."""

    def __init__(self, root: str, options: dict[str, Any] | None = None) -> None:
        self.options = dict(options or {})
        self.fs, path = fsspec.core.url_to_fs(root, **self.options)
        self.path: str = path.rstrip("/")
        # DCP gets a URL (it resolves the filesystem itself); a local path is made absolute once.
        self.url = self.path if self.is_local() else root.rstrip("/")

    # -- what is there ----------------------------------------------------------------------------

    def committed_steps(self) -> list[int]:
        """Steps with a marker, oldest first."""
        self.fs.invalidate_cache(self.path)  # other processes may have committed since we last listed
        markers = self.fs.glob(f"{self.path}/step-*/{MARKER}")
        return sorted(s for m in markers if (s := _parse_step(posixpath.dirname(m))) is not None)

    def step_dirs(self) -> list[int]:
        """Steps with a directory, committed or not, oldest first."""
        self.fs.invalidate_cache(self.path)
        return sorted(s for p in self.fs.glob(f"{self.path}/step-*") if (s := _parse_step(p)) is not None)

    def listing(self, step: int) -> dict[str, int]:
        """Files of a step directory (relative name -> size), the marker left out."""
        root = self.step_path(step)
        self.fs.invalidate_cache(root)
        found: dict[str, Any] = self.fs.find(root, detail=True)
        files = {}
        for path, info in found.items():
            name = posixpath.relpath(path, root) if path.startswith(root + "/") else path
            if name != MARKER:
                files[name] = int(info.get("size") or 0)
        return files

    def has_marker(self, step: int) -> bool:
        return bool(self.fs.exists(self.marker(step)))

    # -- reads and writes -------------------------------------------------------------------------

    def digest(self, step: int, name: str) -> FileDigest:
        """Size and sha256 of a file of the step as storage holds it now."""
        digest, size = hashlib.sha256(), 0
        with self.fs.open(f"{self.step_path(step)}/{name}", "rb") as f:
            while chunk := f.read(_READ_CHUNK):
                digest.update(chunk)
                size += len(chunk)
        return FileDigest(size, digest.hexdigest())

    def open(self, step: int, name: str) -> IO[bytes]:
        stream: IO[bytes] = self.fs.open(f"{self.step_path(step)}/{name}", "rb")
        return stream

    def read_marker(self, step: int) -> bytes:
        with self.fs.open(self.marker(step), "rb") as marker:
            raw: bytes = marker.read(MAX_MARKER_BYTES + 1)
        return raw

    def write_marker(self, step: int, raw: bytes) -> None:
        with self.fs.open(self.marker(step), "wb") as marker:
            marker.write(raw)

    def remove_marker(self, step: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self.marker(step))

    def remove(self, step: int) -> None:
        self.remove_marker(step)  # first, so a half-deleted directory is never "committed"
        self.fs.rm(self.step_path(step), recursive=True)

    # -- DCP's view -------------------------------------------------------------------------------

    def writer(self, step: int, threads: int) -> FsspecWriter:
        # DCP's fsspec storage is not re-exported by torch.distributed.checkpoint in torch 2.13; it is what
        # dcp.save picks itself for URLs, but only this way can fsspec storage options be passed to it.
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

        # fsync only means something on a local disk; for other filesystems DCP would fall back to
        # os.sync() of the whole host, while an object store commits a file when it is closed.
        return FsspecWriter(self.step_url(step), sync_files=self.is_local(), thread_count=threads, **self.options)

    def reader(self, step: int) -> SafeReader:
        from trainer.checkpoint.dcp_pickle import SafeReader

        return SafeReader(self.step_url(step), **self.options)

    # -- paths ------------------------------------------------------------------------------------

    def step_url(self, step: int) -> str:
        return f"{self.url}/{step_dir(step)}"

    def step_path(self, step: int) -> str:
        return f"{self.path}/{step_dir(step)}"

    def marker(self, step: int) -> str:
        return f"{self.step_path(step)}/{MARKER}"

    def is_local(self) -> bool:
        protocol = self.fs.protocol
        return "file" in ((protocol,) if isinstance(protocol, str) else protocol)


def _parse_step(path: str) -> int | None:
    match = _STEP_DIR.fullmatch(posixpath.basename(path.rstrip("/")))
    return int(match.group(1)) if match else None
