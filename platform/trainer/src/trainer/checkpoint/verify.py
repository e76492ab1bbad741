"""Whether a committed step can be trusted: its marker, its files' sizes and hashes, and its pickles.

A checkpoint is only trusted when its marker parses and validates and every listed file is there with
that size and hash, and no other file is, and its pickles (``.metadata`` and every non-tensor value)
are what DCP writes (checkpoint/dcp_pickle.py: nothing else is unpickled, so a crafted folder with a valid marker
cannot run code). Anything else is a one-line reason.
"""

from __future__ import annotations

import io

from trainer.checkpoint.dcp_pickle import UnsafeCheckpoint, bytes_entries, load_plain, read_metadata
from trainer.checkpoint.manifest import InvalidCheckpoint, check_names, invalid, parse_marker
from trainer.checkpoint.store import StepStore


def why_untrusted(store: StepStore, step: int, raw: bytes) -> str | None:
    """None when committed ``step``, whose marker is ``raw``, verifies; else the one-line reason it does not.

    Reads every file of the step back (the cost of one more read of the checkpoint).
    """
    try:
        check_step(store, step, raw)
    except (InvalidCheckpoint, UnsafeCheckpoint) as error:
        return str(error)
    except OSError as error:  # e.g. a file vanished or storage refused a read: not trusted now
        return unreadable(error)
    return None


def unreadable(error: OSError) -> str:
    return f"could not be read: {type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"


def check_step(store: StepStore, step: int, raw: bytes) -> None:
    """InvalidCheckpoint or UnsafeCheckpoint unless the step holds exactly what its marker lists, unaltered."""
    expected = parse_marker(raw, step)
    present = store.listing(step)
    check_names(expected, present)
    for name, digest in sorted(expected.items()):
        if present[name] != digest.size:
            invalid(f"{name} has {present[name]} bytes, the marker says {digest.size}")
        if store.digest(step, name).sha256 != digest.sha256:
            invalid(f"{name} does not match its sha256 (flipped or rewritten bytes)")
    check_pickles(store, step, present)


def check_pickles(store: StepStore, step: int, present: dict[str, int]) -> None:
    """UnsafeCheckpoint unless ``.metadata`` and every non-tensor value unpickle as plain DCP data.

    The same restricted readers as ``Checkpointer.load()``, so a crafted step is skipped here with its
    reason instead of failing the load. Reads only the non-tensor slices: small (hyperparameters, RNG states).
    """
    with store.open(step, ".metadata") as stream:
        metadata = read_metadata(stream)
    for name, info in bytes_entries(metadata):
        if info.relative_path not in present or info.offset + info.length > present[info.relative_path]:
            raise UnsafeCheckpoint(f".metadata: {name[:80]} lies outside the files of the step")
        with store.open(step, info.relative_path) as data:
            data.seek(info.offset)
            load_plain(io.BytesIO(data.read(info.length)), name)
