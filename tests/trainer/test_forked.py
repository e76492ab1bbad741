"""The local launchers' processes are forks of one process per run that imported the entry points once
(trainer/launch/forked.py): each keeps what a `python -m` process had: its own log, environment, torch
threads and exit code, and a kill is reported as Popen reports it."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from trainer.launch import forked

from tests.waiting import until

ENTRY = "tests.trainer.forked_entry"


@pytest.fixture(scope="module", autouse=True)
def _forkserver() -> Iterator[None]:
    """One forkserver for the module, which also imports this test's entry point; stopped at the end."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(forked, "ENTRY_POINTS", (*forked.ENTRY_POINTS, ENTRY))
        yield
    forked.stop()


def test_a_fork_has_its_environment_threads_and_log_and_exits_with_its_code(tmp_path: Path) -> None:
    log = tmp_path / "group-0.log"
    environ = dict(os.environ) | {"OMP_NUM_THREADS": "1", "MARK": "group-0"}
    proc = forked.start(ENTRY, ["exit", "3"], environ, log)
    assert proc.wait(timeout=120) == 3
    assert log.read_text() == "threads 1 mark group-0 argv ['exit', '3']\n"


def test_a_fork_starts_with_what_every_optimizer_imports_already_imported(tmp_path: Path) -> None:
    """torch.optim imports torch._dynamo at an optimizer's first call: once in the forkserver, not in every rank."""
    log = tmp_path / "group-2.log"
    proc = forked.start(ENTRY, ["modules", "0"], dict(os.environ), log)
    assert proc.wait(timeout=120) == 0
    assert log.read_text().splitlines()[1] == "torch._dynamo True"


def test_a_killed_fork_reports_the_signal_as_popen_does(tmp_path: Path) -> None:
    log = tmp_path / "group-1.log"
    proc = forked.start(ENTRY, ["sleep"], dict(os.environ), log)
    until(lambda: log.exists() and "argv ['sleep']" in log.read_text(), 120, "the fork started")
    assert proc.poll() is None
    proc.kill()
    assert proc.wait(timeout=60) == -signal.SIGKILL


def test_a_real_entry_points_failure_lands_in_its_log(tmp_path: Path) -> None:
    log = tmp_path / "generator-0.log"
    missing = tmp_path / "no-config.json"
    proc = forked.start("trainer.rl.generator_main", [str(missing), "0", "1"], dict(os.environ), log)
    assert proc.wait(timeout=120) not in (None, 0)
    assert str(missing) in log.read_text()


def test_only_the_entry_points_it_imported_can_be_forked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not an entry point"):
        forked.start("os", [], {}, tmp_path / "log")


def test_the_forkservers_output_is_held_until_the_run_keeps_it_then_appended(tmp_path: Path) -> None:
    """The forkserver starts before the run's checks: what it prints waits in memory, so a refused run writes
    nothing; an accepted one gets all of it, in order, in its folder's forkserver.log."""
    read, write = os.pipe()
    output = forked.Output(read)
    log = tmp_path / "runs" / "r" / "forkserver.log"
    os.write(write, b"a warning while importing\n")
    assert not (tmp_path / "runs").exists()
    output.keep(log)
    os.write(write, b"and one after\n")
    os.close(write)
    until(lambda: log.read_text() == "a warning while importing\nand one after\n", 30, "the forkserver's output")
