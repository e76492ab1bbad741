"""Ctrl-C in a launcher: recorded the moment it arrives, and acted on by the launcher's loop as well.

CPython runs a signal's Python handler in the main thread at its next bytecode, wherever that is. When that is
inside a finalizer (a ``__del__``, a weakref callback, an io object closed by the garbage collector), the
KeyboardInterrupt the default handler raises cannot propagate: CPython prints it as "Exception ignored" and
drops it, and the run goes on as if no Ctrl-C came (one local RL run did: SIGINT at step 3, all 200 steps
run, exit 0). Here the handler records the interrupt before it raises, and the loop raises again on the record,
so a dropped raise costs at most one pass of the loop; the dropped one is not printed.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any


class _Record:
    """Set by the handler (a plain attribute: a lock the interrupted code might hold could deadlock it)."""

    pending = False


def _handler(signum: int, frame: FrameType | None) -> None:
    _Record.pending = True
    raise KeyboardInterrupt


def raise_if_interrupted() -> None:
    """For a launcher's loop: the Ctrl-C its handler recorded, even where CPython dropped the first raise."""
    if _Record.pending:
        raise KeyboardInterrupt


def pause(seconds: float) -> None:
    """A launcher loop's wait: ``seconds`` of sleep (a Ctrl-C that raises ends it early), then the recorded one."""
    time.sleep(seconds)
    raise_if_interrupted()


@contextmanager
def recorded() -> Iterator[None]:
    """SIGINT recorded while the block runs (main thread only: Python sets signal handlers there)."""
    _Record.pending = False
    before_handler, before_hook = signal.signal(signal.SIGINT, _handler), sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if not (_Record.pending and isinstance(unraisable.exc_value, KeyboardInterrupt)):
            before_hook(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before_handler)
        sys.unraisablehook = before_hook
        _Record.pending = False
