"""The pickles in a DCP checkpoint, read so that a crafted one cannot run code (issue 27).

A checkpoint folder is storage that someone else may have written, and torch 2.13's DCP unpickles two
things from it with no restriction:

* ``.metadata``: ``FileSystemReader.read_metadata`` is ``pickle.load`` of the whole file;
* every non-tensor value (``LoadItemType.BYTE_IO``: optimizer hyperparameters, RNG states, counters):
  ``DefaultLoadPlanner.load_bytes`` is ``torch.load(weights_only=False)``.

A COMMITTED marker does not help: whoever crafted the folder wrote a valid one. Here ``.metadata`` is read
by an unpickler that can build only the classes DCP's metadata is made of (``torch/distributed/checkpoint/
metadata.py``, the filesystem writer's ``_StorageInfo``, ``torch.Size``, dtypes and layouts), and is then
checked field by field; non-tensor values go through ``torch.load(weights_only=True)``, torch's own
restricted unpickler (tensors, containers, numbers, strings). Tensors were always read with
``weights_only=True`` by DCP itself. Both refusals are ``UnsafeCheckpoint`` with a one-line reason.
"""

from __future__ import annotations

import io
import pickle
import re
from typing import IO, Any

import torch
from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import ReadItem

_DCP = "torch.distributed.checkpoint.metadata"
# (module, name) pairs a .metadata written by torch 2.13's DCP refers to (found by unpickling the trainer's
# own checkpoints with a logging find_class; tests/trainer/test_dcp_pickle.py keeps that true).
_ALLOWED = {
    *(
        (_DCP, name)
        for name in (
            "Metadata",
            "TensorStorageMetadata",
            "BytesStorageMetadata",
            "ChunkStorageMetadata",
            "TensorProperties",
            "MetadataIndex",
            "StorageMeta",
            "_MEM_FORMAT_ENCODING",  # TensorProperties pickles its memory format as this enum
        )
    ),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),  # how torch pickles a layout: a lookup by name among torch's layouts
    ("collections", "OrderedDict"),  # not seen in 2.13's metadata; a plain container, harmless if a version uses it
}
# A data file DCP writes: flat in the step directory (checkpoint/manifest.py's _FILE_NAME without .metadata).
_DATA_FILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}")


class UnsafeCheckpoint(ValueError):
    """A pickle in a checkpoint that this trainer will not unpickle; ``str()`` is the one-line reason."""


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise UnsafeCheckpoint(f".metadata refers to {module[:80]}.{name[:80]}, which is not part of DCP's metadata")

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafeCheckpoint(".metadata holds a persistent reference, which DCP's metadata never does")


def read_metadata(stream: IO[bytes] | io.IOBase) -> Metadata:
    """DCP's metadata from an open ``.metadata``; UnsafeCheckpoint when it is anything else."""
    try:
        metadata = _MetadataUnpickler(stream).load()
    except UnsafeCheckpoint:
        raise
    except Exception as error:  # truncated, or an allowed class built from arguments it refuses
        raise UnsafeCheckpoint(f".metadata is not DCP's metadata ({type(error).__name__}: {_line(error)})") from None
    _check(metadata)
    return metadata  # type: ignore[no-any-return]


def _check(metadata: Any) -> None:
    """Every field of the metadata has the type DCP gives it; data files lie in the checkpoint's directory."""
    if type(metadata) is not Metadata:
        raise UnsafeCheckpoint(f".metadata holds a {type(metadata).__name__[:80]}, not DCP's Metadata")
    entries = metadata.state_dict_metadata
    if not isinstance(entries, dict) or not all(
        type(k) is str and (type(v) is BytesStorageMetadata or _is_tensor_entry(v)) for k, v in entries.items()
    ):
        raise UnsafeCheckpoint(".metadata: state_dict_metadata is not a map of names to tensor or bytes entries")
    storage = metadata.storage_data
    if not isinstance(storage, dict):
        raise UnsafeCheckpoint(".metadata: storage_data is not a map of entries to file slices")
    for index, info in storage.items():
        if type(index) is not MetadataIndex or type(index.fqn) is not str or type(info) is not _StorageInfo:
            raise UnsafeCheckpoint(".metadata: storage_data is not a map of entries to file slices")
        path = info.relative_path
        if type(path) is not str or not _DATA_FILE.fullmatch(path) or path in (".", ".."):
            raise UnsafeCheckpoint(f".metadata: {index.fqn[:80]} lies in {path!r:.80}, outside the checkpoint")
        if not (_whole(info.offset) and _whole(info.length)) or info.transform_descriptors:
            raise UnsafeCheckpoint(f".metadata: {index.fqn[:80]} has a bad offset, length or transform")
    if metadata.storage_meta is not None and type(metadata.storage_meta) is not StorageMeta:
        raise UnsafeCheckpoint(".metadata: storage_meta is not DCP's StorageMeta")


def _is_tensor_entry(value: Any) -> bool:
    return (
        type(value) is TensorStorageMetadata
        and type(value.properties) is TensorProperties
        and isinstance(value.properties.dtype, torch.dtype)
        and type(value.size) is torch.Size
        and isinstance(value.chunks, list)
        and all(type(c) is ChunkStorageMetadata for c in value.chunks)
    )


def _whole(value: Any) -> bool:
    return type(value) is int and value >= 0


def load_plain(value: IO[bytes], what: str) -> Any:
    """A non-tensor value DCP saved with torch.save, read by torch's restricted unpickler."""
    try:
        return torch.load(value, map_location="cpu", weights_only=True)
    except Exception as error:  # torch's UnpicklingError names the refused global deep in a long message
        found = re.search(r"[Uu]nsupported [^\n]*", str(error))
        why = found.group(0).split(". ")[0].rstrip(".") if found else _line(error)
        raise UnsafeCheckpoint(f"{what[:120]} is not a plain value or tensor ({why[:200]})") from None


def bytes_entries(metadata: Metadata) -> list[tuple[str, _StorageInfo]]:
    """(name, file slice) of every non-tensor value, in file order: what ``load_plain`` reads."""
    names = {k for k, v in metadata.state_dict_metadata.items() if type(v) is BytesStorageMetadata}
    found = [(index.fqn, info) for index, info in metadata.storage_data.items() if index.fqn in names]
    return sorted(found, key=lambda item: (item[1].relative_path, item[1].offset))


class SafeReader(FsspecReader):
    """DCP's fsspec reader with ``.metadata`` read by ``read_metadata`` above instead of ``pickle.load``."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        with self.fs.create_stream(self._get_metadata_path(kwargs.get("rank")), "rb") as stream:
            metadata = read_metadata(stream)
        if metadata.storage_meta is None:  # as FileSystemReader.read_metadata does
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class SafePlanner(DefaultLoadPlanner):
    """DCP's default load planner with non-tensor values read by ``load_plain`` instead of ``weights_only=False``."""

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        fqn = read_item.dest_index.fqn
        loaded = load_plain(value, fqn)
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], loaded)
        else:
            self.state_dict[fqn] = loaded


def _line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:200] if text else type(error).__name__
