"""The ``COMMITTED`` marker: the manifest written last into a step directory, and its strict reader.

``COMMITTED`` is ``{"schema": 1, "step", "time", "bytes", "files": {name: {"size", "sha256"}}}``: every
file DCP wrote for the step, read back from storage after the upload. Pure: no storage, no torch.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass
from typing import Any, NoReturn

MARKER = "COMMITTED"
SCHEMA = 1  # of the COMMITTED manifest; a marker without it (written before checksums) is not trusted
MAX_MARKER_BYTES = 4 << 20  # ~30k files; a bigger marker is hostile, not read into memory
# A file DCP writes: flat in the step directory, no separators, so a name can never leave it.
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}|\.metadata")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_MAX_FILES = 100_000
_MAX_SIZE = 1 << 50  # 1 PiB: any larger size or total is forged


class InvalidCheckpoint(ValueError):
    """A committed checkpoint that must not be loaded; ``str()`` is the one-line reason."""


@dataclass(frozen=True)
class FileDigest:
    size: int
    sha256: str


def encode_marker(step: int, files: dict[str, FileDigest]) -> bytes:
    """The marker of ``step`` listing ``files`` (what storage holds, read back), stamped now."""
    record = {
        "schema": SCHEMA,
        "step": step,
        "time": time.time(),
        "bytes": sum(d.size for d in files.values()),
        "files": {name: {"size": d.size, "sha256": d.sha256} for name, d in sorted(files.items())},
    }
    return json.dumps(record, sort_keys=True).encode()


def parse_marker(raw: bytes, step: int) -> dict[str, FileDigest]:
    """The files a ``COMMITTED`` marker of ``step`` lists, after validating every field.

    Pure: raises InvalidCheckpoint (one line) for anything but a well-formed manifest of this step.
    """
    if len(raw) > MAX_MARKER_BYTES:
        invalid(f"marker is {len(raw)} bytes (at most {MAX_MARKER_BYTES})")
    try:
        record = json.loads(raw, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constant)
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        invalid(f"marker is not JSON: {str(error).splitlines()[0][:200]}")
    if not isinstance(record, dict):
        invalid("marker is not a JSON object")
    schema = record.get("schema")
    if schema != SCHEMA or isinstance(schema, bool):
        invalid(f"marker schema is {short(schema)}, expected {SCHEMA} (written before checksums, or forged)")
    if _whole(record.get("step"), 0, 10**12) != step:
        invalid(f"marker step {short(record.get('step'))} is not the directory's step {step}")
    when = record.get("time")
    if isinstance(when, bool) or not isinstance(when, int | float) or not math.isfinite(when) or when < 0:
        invalid(f"marker time {short(when)} is not a timestamp")
    digests = _file_digests(record.get("files"))
    total = _whole(record.get("bytes"), 0, _MAX_SIZE * _MAX_FILES)
    if total != sum(d.size for d in digests.values()):
        invalid(f"marker bytes {short(record.get('bytes'))} is not the sum of the file sizes")
    return digests


def _file_digests(files: Any) -> dict[str, FileDigest]:
    """The marker's ``files``: a non-empty table of this directory's file names, DCP's .metadata among them."""
    if not isinstance(files, dict) or not files:
        invalid("marker lists no files")
    if len(files) > _MAX_FILES:
        invalid(f"marker lists {len(files)} files (at most {_MAX_FILES})")
    digests: dict[str, FileDigest] = {}
    for name, entry in files.items():
        if not _FILE_NAME.fullmatch(name) or name in (".", "..", MARKER):
            invalid(f"marker lists the file name {short(name)}, which is not a file of this directory")
        if not isinstance(entry, dict) or set(entry) != {"size", "sha256"}:
            invalid(f"marker entry of {name} is not {{size, sha256}}")
        size = _whole(entry["size"], 0, _MAX_SIZE)
        digest = entry["sha256"]
        if size is None or not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            invalid(f"marker entry of {name} has a bad size or sha256")
        digests[name] = FileDigest(size, digest)
    if ".metadata" not in digests:
        invalid("marker does not list DCP's .metadata")
    return digests


def check_names(expected: dict[str, FileDigest], present: dict[str, int]) -> None:
    """InvalidCheckpoint unless the directory holds exactly the files the marker lists (sizes aside)."""
    missing = sorted(set(expected) - set(present))
    unlisted = sorted(set(present) - set(expected))
    if missing:
        invalid(f"{missing[0]} is missing" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    if unlisted:
        invalid(f"{short(unlisted[0])} is not listed in the marker")


def invalid(reason: str) -> NoReturn:
    raise InvalidCheckpoint(reason)


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _whole(value: Any, low: int, high: int) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    return value if ok else None


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate key")  # two values for one field: which one would be believed?
    return dict(pairs)


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")
