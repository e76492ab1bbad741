"""Ctrl-C reaches a launcher's loop even when CPython drops the KeyboardInterrupt (launch/interrupt.py)."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import pytest
from trainer.launch.interrupt import pause, raise_if_interrupted, recorded


class _SignalledWhileCollected:
    """An object whose finalizer is running when SIGINT's handler runs, as a collected socket's close can be."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs before kill returns, inside this finalizer


def _loop_pass() -> None:
    """What a launcher's loop does: something is collected, then it looks for Ctrl-C."""
    _SignalledWhileCollected()  # collected at once: its finalizer runs here
    pause(0)


@pytest.fixture
def dropped(monkeypatch: pytest.MonkeyPatch) -> list[BaseException]:
    """What CPython reports as "Exception ignored" (sys.unraisablehook: it prints them, pytest's warns)."""
    seen: list[BaseException] = []

    def hook(unraisable: Any) -> None:
        seen.append(unraisable.exc_value)

    monkeypatch.setattr(sys, "unraisablehook", hook)
    return seen


def test_ctrl_c_during_a_finalizer_still_stops_the_loop_and_prints_nothing(dropped: list[BaseException]) -> None:
    with recorded(), pytest.raises(KeyboardInterrupt):
        _loop_pass()
    assert dropped == []  # the dropped raise is not printed as "Exception ignored"
    assert sys.unraisablehook.__name__ == "hook"  # the block gave back the hook it found


def test_without_the_record_cpython_drops_that_ctrl_c(dropped: list[BaseException]) -> None:
    """Why the record exists: with Python's own handler the same pass ends normally, the interrupt lost."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _loop_pass()
    finally:
        signal.signal(signal.SIGINT, before)
    assert [type(e) for e in dropped] == [KeyboardInterrupt]


def test_the_record_ends_with_its_block() -> None:
    with recorded():
        pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    raise_if_interrupted()  # nothing recorded outside a block


def test_a_ctrl_c_raises_at_once_where_it_can() -> None:
    with recorded(), pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
