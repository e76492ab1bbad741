"""The console of real runs: one line per logging window and the outcome; torchft's and the Lighthouse's logs in
files (the console's lines from recorded events: test_console_lines.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.trainer.conftest import run

pytestmark = pytest.mark.live  # each test runs the driver; the console's own tests: test_console_lines.py

STEP_LINE = re.compile(
    r"^step (\d+)/40  loss (\d+\.\d{4})  tokens/s [\d,]+  MFU (n/a|\d+\.\d%)  participants [12]  goodput \d+\.\d%$"
)
RECOVERY_LINE = re.compile(
    r"^replica group [01]: (resumed from checkpoint step \d+ \(.+\)|healed from a live group at step \d+)$"
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
    # Nothing else: no Lighthouse, torchft or quorum lines. A group that starts late under load (recorded in CI: one
    # joined after the other's step-20 checkpoint) prints the console's own recovery lines, and only those.
    others = [line for line in lines[:-1] if not STEP_LINE.match(line)]
    assert all(RECOVERY_LINE.match(line) for line in others), out
    runs = tmp_path / "runs" / "quiet"
    assert "lighthouse" in (runs / "lighthouse.log").read_text().lower()  # the Lighthouse's INFO logs went here
    assert (runs / "group-0.log").stat().st_size > 0
    assert json.loads((runs / "goodput.json").read_text())["outcome"] == "completed"


def test_rerunning_a_finished_run_says_there_is_nothing_to_do(tmp_path: Path) -> None:
    extra = ("run.steps=20", "checkpoint.every=10", "ft.replica_groups=1", "ft.enabled=false")
    run(tmp_path, "twice", *extra)
    again = run(tmp_path, "twice", *extra)
    assert again.strip() == "nothing to do: run twice already completed step 20 of 20; raise run.steps to train on"
