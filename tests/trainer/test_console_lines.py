"""The console's lines and files, from recorded events and a console of its own: no run is started
(the runs that print them are in tests/trainer/test_console.py, marked live)."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest
from trainer.observe.console import Console, native_stderr_to, outcome_line
from trainer.observe.runs import EventLog, final_reports


def test_the_console_follows_only_this_runs_events_and_combines_groups(tmp_path: Path) -> None:
    EventLog(tmp_path / "events-0.jsonl").write("step", step=10, loss=9.0)  # an earlier run's
    stream = io.StringIO()
    console = Console(tmp_path, 20, stream)
    a, b = EventLog(tmp_path / "events-0.jsonl"), EventLog(tmp_path / "events-1.jsonl")
    a.write("step", step=10, loss=2.0, tokens_per_s=100.0, mfu=None, participants=2, goodput=0.5)
    b.write("step", step=10, loss=4.0, tokens_per_s=50.0, mfu=None, participants=2, goodput=0.7)
    b.file.write('{"event": "step", "st')  # a line still being written
    b.file.flush()
    console.poll()
    a.write("step", step=20, loss=1.0, tokens_per_s=100.0, mfu=0.25, participants=1, goodput=0.8)
    a.write("stopped", group=0, reason="non-finite loss")
    console.poll()
    assert stream.getvalue().splitlines() == [
        "step 10/20  loss 3.0000  tokens/s 150  MFU n/a  participants 2  goodput 60.0%",
        "step 20/20  loss 1.0000  tokens/s 100  MFU 25.0%  participants 1  goodput 80.0%",
        "replica group 0: non-finite loss",
    ]


def test_a_failed_run_never_reports_an_earlier_runs_goodput(tmp_path: Path) -> None:
    old = {"seconds": {"productive": 9.0}, "steps": {"committed": 9}}
    EventLog(tmp_path / "events-0.jsonl").write("final", goodput=old)
    started = json.loads((tmp_path / "events-0.jsonl").read_text())["time"] + 1
    assert final_reports(tmp_path) == [old]
    assert final_reports(tmp_path, since=started) == []
    summary = {"goodput": 0.0, "replica_group_reports": 0}
    line = outcome_line("r", "failed: replica group 1 exited with -9", summary, tmp_path)
    assert (
        line
        == f"run r failed: replica group 1 exited with -9; goodput r: n/a (no replica group finished); logs in {tmp_path}"
    )


def test_native_writes_to_fd_2_go_to_the_file_and_python_stderr_stays(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "native.log"
    with native_stderr_to(log):
        os.write(2, b"INFO lighthouse quorum\n")  # what Rust's logger does
        print("launcher warning", file=sys.stderr)
    os.write(2, b"after\n")
    assert log.read_text() == "INFO lighthouse quorum\n"
    err = capfd.readouterr().err
    assert "launcher warning" in err
    assert "after" in err
    assert "lighthouse" not in err


def test_diloco_shows_inner_steps_between_outer_ones(tmp_path: Path) -> None:
    """300 inner steps synced every 50 are 6 outer steps: the console shows both, not one line at the end."""
    stream = io.StringIO()
    console = Console(tmp_path, 6, stream, inner_per_step=50)
    log = EventLog(tmp_path / "events-0.jsonl")
    log.write("inner", step=0, inner_step=20, loss=5.0)
    log.write("inner", step=0, inner_step=40, loss=4.5)
    log.write("step", step=1, loss=4.25, tokens_per_s=10.0, mfu=None, participants=2, goodput=0.9)
    console.poll()
    assert stream.getvalue().splitlines() == [
        "inner step 20/300  outer step 1/6  loss 5.0000",
        "inner step 40/300  outer step 1/6  loss 4.5000",
        "outer step 1/6 (inner step 50/300)  loss 4.2500  tokens/s 10  MFU n/a  participants 2  goodput 90.0%",
    ]


def test_resume_heal_and_restarts_are_console_lines(tmp_path: Path) -> None:
    stream = io.StringIO()
    console = Console(tmp_path, 40, stream)
    EventLog(tmp_path / "events-0.jsonl").write("resumed", step=20, dir="/ckpt/r", from_group=1)
    console.poll()
    console.restarted(1, "exited with -9", 5.0, 1)
    EventLog(tmp_path / "events-1.jsonl").write("healed", step=23)
    console.poll()
    assert stream.getvalue().splitlines() == [
        "replica group 0: resumed from checkpoint step 20 (/ckpt/r, group 1)",
        "replica group 1: exited with -9; restarting it in 5 s (restart 1 of 3)",
        "replica group 1: healed from a live group at step 23",
    ]


def test_a_goodput_dip_says_which_group_restarted(tmp_path: Path) -> None:
    stream = io.StringIO()
    console = Console(tmp_path, 40, stream)
    a, b = EventLog(tmp_path / "events-0.jsonl"), EventLog(tmp_path / "events-1.jsonl")
    a.write("step", step=10, loss=2.0, tokens_per_s=1.0, participants=2, goodput=0.868)
    console.poll()
    console.restarted(1, "exited with -9", 5.0, 1)
    a.write("step", step=20, loss=1.0, tokens_per_s=1.0, participants=1, goodput=0.87)
    b.write("step", step=20, loss=1.0, tokens_per_s=1.0, participants=2, goodput=0.412)
    console.poll()
    a.write("step", step=30, loss=1.0, tokens_per_s=1.0, participants=2, goodput=0.88)
    b.write("step", step=30, loss=1.0, tokens_per_s=1.0, participants=2, goodput=0.5)
    console.poll()
    lines = stream.getvalue().splitlines()
    assert lines[2].endswith("goodput 64.1%  (group 1 restarted: its start-up and recovery count against goodput)")
    assert lines[3].endswith("goodput 69.0%")  # rising again: nothing to explain
