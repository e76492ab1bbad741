"""Staged, then durable, checkpoints with torch.distributed.checkpoint (DCP), trusted only when they verify.

One module per job:

* ``checkpointer.py``: the ``Checkpointer`` the training loop calls (cadence, save, wait, latest, load),
  the background commit and pruning;
* ``store.py``: one root's step directories on fsspec storage (local, ``file://``, ``gs://``);
* ``manifest.py``: the ``COMMITTED`` marker, written last, and its strict reader;
* ``verify.py``: whether a committed step can be trusted (marker, sizes, sha256, pickles);
* ``staging.py``: how DCP copies the state out of the training loop's way;
* ``finite.py``: the NaN and infinity check a state passes before it is saved.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainer.checkpoint.checkpointer import Checkpointer, CheckpointError, CheckpointEvent
    from trainer.checkpoint.finite import nonfinite_tensors
    from trainer.checkpoint.manifest import MARKER, SCHEMA, FileDigest, InvalidCheckpoint, parse_marker
    from trainer.checkpoint.staging import staging_options
    from trainer.checkpoint.store import step_dir

# Each name from its module when first asked for: importing this package (for resume.py's listing, which a
# launcher runs before it starts anything) must not import torch's DCP, 2 s of a run's start on one core.
_MODULES = {
    "Checkpointer": "checkpointer", "CheckpointError": "checkpointer", "CheckpointEvent": "checkpointer",
    "nonfinite_tensors": "finite", "MARKER": "manifest", "SCHEMA": "manifest", "FileDigest": "manifest",
    "InvalidCheckpoint": "manifest", "parse_marker": "manifest", "staging_options": "staging", "step_dir": "store",
}  # fmt: skip
__all__ = [
    "MARKER",
    "SCHEMA",
    "CheckpointError",
    "CheckpointEvent",
    "Checkpointer",
    "FileDigest",
    "InvalidCheckpoint",
    "nonfinite_tensors",
    "parse_marker",
    "staging_options",
    "step_dir",
]


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULES[name]}"), name)
