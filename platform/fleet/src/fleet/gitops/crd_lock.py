"""The pinned upstream CRDs, locked: each file's place under a CRD root, the URL upstream serves it at, its sha256.

`requirements/crds.lock.json` is written from a folder that holds the pinned files
(`scripts/fetch_crds.py --write-lock ../shared/crds`), one entry per file `crd_sources` names for the
versions fleet.yaml pins; tests/gitops/test_crd_lock.py fails when a version bump leaves it behind.
`fleet.gitops.crd_fetch` reads it to check the CRDs a machine provides and the ones it downloads.

A lock is a file a commit can change, so it is decoded like any other document (contract.codec) and its
paths are checked before one is joined to a folder: relative, each part starting with a letter or a digit
(so never `..`), ending in `.yaml`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from contract import codec
from contract.problem import Invalid

LOCK = Path("requirements/crds.lock.json")
SCHEMA = "meridian.crds-lock/v1"
FIX = "regenerate it with `scripts/fetch_crds.py --write-lock DIR`, DIR holding the pinned CRDs (../shared/crds)"
_PATH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(?:/[A-Za-z0-9][A-Za-z0-9._-]*)*\.yaml")
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, kw_only=True)
class LockedCrd:
    path: str  # under a CRD root: <project>/<version>/<upstream file name> (fleet.gitops.validate.crd_folders)
    url: str  # where upstream serves it, at the pinned commit or tag
    sha256: str  # of the file's bytes, lowercase hex

    @property
    def folder(self) -> str:
        """The folder validation reads as one (a pinned release of one project)."""
        return self.path.rpartition("/")[0]


@dataclass(frozen=True, kw_only=True)
class CrdLock:
    files: tuple[LockedCrd, ...]


def problems(lock: CrdLock) -> list[str]:
    """What makes a decoded lock unusable, one line each with its path."""
    found = []
    seen: set[str] = set()
    for i, crd in enumerate(lock.files):
        if not _PATH.fullmatch(crd.path):
            found.append(f"files[{i}].path: {crd.path!r} is not a relative path of a .yaml file")
        if crd.path in seen:
            found.append(f"files[{i}].path: {crd.path!r} is listed twice")
        seen.add(crd.path)
        if not crd.url.startswith("https://"):
            found.append(f"files[{i}].url: {crd.url!r} is not an https:// URL")
        if not _SHA256.fullmatch(crd.sha256):
            found.append(f"files[{i}].sha256: {crd.sha256!r} is not 64 lowercase hex digits")
    return found


def loads(text: str, where: str) -> CrdLock:
    """The lock in `text`; Invalid (one line per problem, each naming `where`) when it is not a usable one."""
    lock = codec.loads(CrdLock, text, SCHEMA, where, FIX)
    found = problems(lock)
    if found:
        raise Invalid([f"{where}: {line}; {FIX}" for line in found])
    return lock


def dumps(lock: CrdLock) -> str:
    return codec.dumps(lock, SCHEMA)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def lock_of(sources: Iterable[tuple[str, str]], folder: Path) -> CrdLock:
    """The lock of `sources` ((path, URL) pairs, fleet.gitops.crd_sources) from the files under `folder`."""
    sources = list(sources)
    absent = [path for path, _ in sources if not (folder / path).is_file()]
    if absent:
        raise Invalid(
            [f"{folder}: no {path}; put the pinned file there or lock from another folder" for path in absent]
        )
    return CrdLock(
        files=tuple(LockedCrd(path=path, url=url, sha256=sha256((folder / path).read_bytes())) for path, url in sources)
    )
