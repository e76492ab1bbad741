"""The console: one line per logging window and the outcome; torchft's and the Lighthouse's logs in files."""

from __future__ import annotations

import io
import json
import os
import re
import sys
from pathlib import Path

import pytest
from trainer.console import Console, native_stderr_to, outcome_line
from trainer.runs import EventLog, final_reports

from tests.trainer.conftest import run

STEP_LINE = re.compile(
    r"^step (\d+)/40  loss (\d+\.\d{4})  tokens/s [\d,]+  MFU (n/a|\d+\.\d%)  participants [12]  goodput \d+\.\d%$"
)


def test_a_short_run_prints_the_loss_per_window_and_no_lighthouse_lines(tmp_path: Path) -> None:
    out = run(tmp_path, "quiet", "run.steps=40", "checkpoint.every=20", "perf.peak_tflops=0.5")
    lines = out.splitlines()
    steps = [STEP_LINE.match(line) for line in lines]
    assert [int(m.group(1)) for m in steps if m] == [10, 20, 30, 40], out
    assert all(m.group(3) != "n/a" for m in steps if m)  # a configured peak gives an MFU
    losses = [float(m.group(2)) for m in steps if m]
    assert losses[-1] < losses[0]  # the loss is visible, and falls
    assert lines[-1].startswith("run quiet completed; goodput quiet: ")
    assert "over 2 replica group report(s)" in lines[-1]
    assert len(lines) == 5, out  # nothing else: no Lighthouse, torchft or quorum lines
    runs = tmp_path / "runs" / "quiet"
    assert "lighthouse" in (runs / "lighthouse.log").read_text().lower()  # the Lighthouse's INFO logs went here
    assert (runs / "group-0.log").stat().st_size > 0
    assert json.loads((runs / "goodput.json").read_text())["outcome"] == "completed"


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
