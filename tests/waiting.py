"""The one polling loop of the tests (tests/test_one_helper.py refuses a second copy): wait for a recorded fact
(a step in a run's events, a file, a counter), bounded, and say which fact never came."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def until(
    ready: Callable[[], T | None],
    within_s: float,
    what: str,
    proc: subprocess.Popen[str] | None = None,
    every_s: float = 0.1,
) -> T:
    """The first value of ``ready()`` that is not false, polled every ``every_s``. Fails naming ``what`` when
    ``within_s`` passes first, or when ``proc`` (the run that should produce it) ends first, with its output's tail."""
    deadline = time.monotonic() + within_s
    while not (found := ready()):
        if proc is not None and proc.poll() is not None:
            output = proc.communicate()[0] if proc.stdout is not None else ""
            raise AssertionError(f"the run ended before {what}: {(output or '')[-3000:]}")
        assert time.monotonic() < deadline, f"never {what} within {within_s} s"
        time.sleep(every_s)
    return found
