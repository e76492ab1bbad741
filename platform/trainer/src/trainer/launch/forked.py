"""A local run's processes, forked from one that imported the trainer once (Python's forkserver).

Started as ``python -m <entry point>``, every replica-group rank and RL generator imported torch, torchft and
the trainer again: 2.5-3 s of a core each, more than a short run trains, and again at every restart. Here one
process per run (multiprocessing's forkserver, started by the launcher before its Lighthouse) imports the entry
points once, and each rank or generator is a fork of it. The forkserver has run no torch operation, so no thread
pool or collective exists to be copied half-made into a fork; each fork sets its own torch threads, environment
and log file, then runs the entry point's ``main`` as ``python -m`` would.

What a fork does not get, compared with a fresh interpreter: settings read only at import time come from the
forkserver's environment (the launcher's, plus ``SERVER_ENVIRON``: torchft's Rust log level), and ``atexit``
handlers do not run (multiprocessing ends a fork with ``os._exit``; event logs are line-buffered and flushed).
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from trainer.launch.process import exit_process

ENTRY_POINTS = ("trainer.launch.worker_main", "trainer.rl.generator_main")
# Imported by the forkserver too, though no entry point imports it: torch.optim imports torch._dynamo at an
# optimizer's first method call (its torch._disable_dynamo wrappers), 1.4 s of CPU in every rank, a restarted
# one included, while its group was starting.
SHARED_IMPORTS = ("torch._dynamo",)
# Read once, when torchft's Rust extension is imported (its logger): the ranks' torchft INFO lines (every quorum)
# go to their group's log.
SERVER_ENVIRON = {"RUST_LOG": "info"}


class Forked:
    """What the launchers use of ``subprocess.Popen``, for a forked process: pid, poll, kill, wait."""

    def __init__(self, process: Any) -> None:
        self._process = process
        self.pid: int = process.pid

    def poll(self) -> int | None:
        """The exit code (negative: the signal that ended it), None while it runs."""
        code: int | None = self._process.exitcode
        return code

    def kill(self) -> None:
        self._process.kill()

    def wait(self, timeout: float | None = None) -> int | None:
        self._process.join(timeout)
        return self.poll()


def start(module: str, args: list[str], environ: Mapping[str, str], log: Path) -> Forked:
    """Run ``python -m module *args`` with ``environ`` (the whole environment), its output appended to ``log``."""
    if module not in ENTRY_POINTS:
        raise ValueError(f"{module} is not an entry point the forkserver imported: {ENTRY_POINTS}")
    process = _context().Process(target=_run, args=(module, args, dict(environ), str(log)), name=module)
    process.start()
    return Forked(process)


def prestart() -> Output:
    """Start the forkserver now: its imports (2 s of a core) run on another core while the launcher checks the
    run's preconditions (which import torch, a second) and imports its own (the first rank otherwise waited for
    them: about 3 s per launch). What it prints (an import's warning) stays off the run's console, held until
    ``Output.keep`` names the run's log: a refused run writes nothing, and ``stop`` ends the server."""
    read, write = os.pipe()
    saved = [os.dup(1), os.dup(2)]
    try:
        _output_to_fd(write)
        _context()
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for kept in (*saved, write):
            os.close(kept)
    return Output(read)


class Output:
    """The forkserver's output, read from its pipe by a thread: held in memory until ``keep``, then appended there."""

    def __init__(self, pipe: int) -> None:
        self._lock = threading.Lock()
        self._held: list[bytes] = []
        self._log: BinaryIO | None = None
        threading.Thread(target=self._pump, args=(pipe,), name="forkserver-output", daemon=True).start()

    def keep(self, log: Path) -> None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self._log = log.open("ab", buffering=0)
            for chunk in self._held:
                self._log.write(chunk)
            self._held.clear()

    def _pump(self, pipe: int) -> None:
        with os.fdopen(pipe, "rb", buffering=0) as source:
            while chunk := source.read(1 << 16):
                with self._lock:
                    if self._log is None:
                        self._held.append(chunk)
                    else:
                        self._log.write(chunk)


def stop() -> None:
    """End the forkserver and multiprocessing's resource tracker with the launch, and wait for them: nothing of a
    run may outlive its launcher (on their own they end once they notice it exited). ``_stop`` is how CPython's
    own tests stop them (3.11-3.13); without it, they end on their own as before."""
    from multiprocessing import forkserver, resource_tracker

    for server in (getattr(forkserver, "_forkserver", None), getattr(resource_tracker, "_resource_tracker", None)):
        getattr(server, "_stop", lambda: None)()


def _context() -> Any:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([*ENTRY_POINTS, *SHARED_IMPORTS])
    with _environ(SERVER_ENVIRON):
        from multiprocessing import forkserver

        forkserver.ensure_running()  # once per launcher: the entry points are imported once
    return context


@contextmanager
def _environ(defaults: Mapping[str, str]) -> Iterator[None]:
    """``defaults`` where the environment has none, for what this process starts inside (the forkserver)."""
    added = {k: v for k, v in defaults.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            del os.environ[key]


def _output_to(log: Path) -> None:
    """File descriptors 1 and 2 (Python's and native code's output) appended to ``log``."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    _output_to_fd(fd)
    os.close(fd)


def _output_to_fd(fd: int) -> None:
    """File descriptors 1 and 2 pointed at ``fd``, after what Python buffered for the old ones is written."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)


def _run(module: str, args: list[str], environ: dict[str, str], log: str) -> None:
    """In the fork: its log on stdout and stderr, its environment and threads, then the entry point."""
    _output_to(Path(log))
    os.environ.clear()
    os.environ.update(environ)
    if environ.get("OMP_NUM_THREADS"):  # read by torch at import, which the forkserver did: set it again
        import torch

        torch.set_num_threads(int(environ["OMP_NUM_THREADS"]))
    sys.argv = [module, *args]
    exit_process(importlib.import_module(module).main())
