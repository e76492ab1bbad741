"""How a healing group receives a live peer's state: torchft's HTTP transport, loaded without running code.

torchft 0.2.0's ``HTTPTransport`` serves the state with PyTorch's streaming save and loads what the
source serves with ``weights_only=False`` (checkpointing/http_transport.py): whoever a quorum names
as the source could run code in the healing group. Its ``PGTransport`` is no better: it sends the
state's metadata (pytree spec, key paths, non-tensor leaves) as a pickle and reads it with
``pickle.loads`` (checkpointing/pg_transport.py). So the trainer keeps torchft's HTTP server and
its wire format for sending, and receives with PyTorch's weights-only unpickler, which rebuilds
tensors, containers and plain values only and refuses any other global (PyTorch's docs,
``torch.load(weights_only=True)``). A state that needs another type fails the heal (the step does
not commit and the group retries), never runs it.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar, cast

import torch
from torchft.checkpointing import HTTPTransport

T = TypeVar("T")

# What torchft's HTTPTransport.metadata() announces: http://host:port/checkpoint/ (the source's own
# ManagerServer hands it over, so it is as hostile as the source; no file:, no other path).
_SOURCE = re.compile(
    r"http://[A-Za-z0-9.\-]{1,253}(:[0-9]{1,5})?/checkpoint/|http://\[[0-9A-Fa-f:.]{2,45}\]:[0-9]{1,5}/checkpoint/"
)


class HealRefused(Exception):
    """The source's announcement or its bytes are not a state this group loads."""


def source_url(metadata: str, step: int) -> str:
    """The URL of the whole state at ``step``, from a source's announced address (or HealRefused)."""
    if not _SOURCE.fullmatch(metadata):
        raise HealRefused(f"heal source announced {metadata[:120]!r}, not http://host:port/checkpoint/")
    return f"{metadata}{step}/full"


class _Bounded:
    """A response read at most ``limit`` bytes far: a source cannot exhaust the healing group's memory."""

    def __init__(self, raw: Any, limit: int) -> None:
        self.raw, self.left = raw, limit

    def _take(self, data: bytes) -> bytes:
        self.left -= len(data)
        if self.left < 0:
            raise HealRefused("heal source sent more than the state this group holds could be")
        return data

    def read(self, size: int = -1) -> bytes:
        return self._take(self.raw.read(self.left + 1 if size < 0 else min(size, self.left + 1)))

    def readline(self, size: int = -1) -> bytes:
        return self._take(self.raw.readline(self.left + 1 if size < 0 else min(size, self.left + 1)))


def load_weights_only(stream: Any, limit: int) -> object:
    """What torchft's HTTP server wrote (PyTorch's streaming format), through the weights-only unpickler."""
    # torchft's own reader of this format (torchft/checkpointing/_serialization.py) is this function.
    from torch.distributed._serialization import _streaming_load

    try:
        return _streaming_load(cast(Any, _Bounded(stream, limit)), weights_only=True)
    except HealRefused:
        raise
    except Exception as error:  # pickle.UnpicklingError for a refused global, and any malformed stream
        raise HealRefused(
            f"heal source sent a state this group does not load: {str(error).splitlines()[0][:200]}"
        ) from None


class WeightsOnlyHTTPTransport(HTTPTransport[T]):  # type: ignore[misc]  # torchft ships no type hints
    """torchft's HTTP transport; ``recv_checkpoint`` loads with the weights-only unpickler, at most ``limit()`` bytes."""

    def __init__(self, timeout: timedelta, limit: Callable[[], int], host: str | None = None) -> None:
        self.host = host  # before torchft's __init__, which logs address()
        super().__init__(timeout=timeout, num_chunks=0)  # one request for the whole state
        self.limit = limit

    def address(self) -> str:
        """torchft's address with `host` (the pod's IP) for its machine's name, which no other pod can resolve."""
        from trainer.ft.manager import with_host

        url: str = super().address()
        return url if self.host is None else with_host(url, self.host)

    def recv_checkpoint(self, src_rank: int, metadata: str, step: int, timeout: timedelta) -> T:
        url = source_url(metadata, step)  # http only: urllib would also open file: URLs
        with urllib.request.urlopen(url, timeout=timeout.total_seconds()) as response:
            state: T = load_weights_only(response, self.limit())  # type: ignore[assignment]
        return state


def state_bytes(tree: Any) -> int:
    """Bytes of the tensors in a state tree: the size a peer's copy of the same state has."""
    if isinstance(tree, torch.Tensor):
        return int(tree.untyped_storage().nbytes())
    if isinstance(tree, dict):
        return sum(state_bytes(v) for v in tree.values())
    if isinstance(tree, list | tuple):
        return sum(state_bytes(v) for v in tree)
    return 0
