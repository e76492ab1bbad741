"""What a researcher meets in a first hour of `train.py configs/grpo.yaml` (issue 41), as a user runs it: a run
that can never form a batch stops with one line and its own exit code instead of waiting for ever; Ctrl-C ends
every process of the run with one line saying how to resume. Each reads what the run printed and recorded."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
from trainer.launch.process import EXIT_STOPPED

from tests.rl.test_distributed import records, start, wait_for_step
from tests.waiting import until

pytestmark = pytest.mark.live  # GRPO runs of the driver


def test_a_run_whose_groups_all_score_alike_stops_saying_why(tmp_path: Path) -> None:
    task = tmp_path / "task.jsonl"  # no completion of digits can be "never": every reward is 0, every group alike
    task.write_text(
        "".join(json.dumps({"prompt": f"{a}+{b}=", "answer": "never"}) + "\n" for a in range(8) for b in range(8))
    )
    proc = start(tmp_path, "alike", f"rl.task={task}", "rl.held_out=8", "rl.max_rollouts=2", "run.steps=8")
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == EXIT_STOPPED, out[-3000:]
    last = out.splitlines()[-1]
    # The count is at least the bound; answers that arrive while no group is asking may take it past it.
    found = re.match(
        r"run alike stopped: (no batch for step 1: (\d+) prompts scored since the last batch \(rl.max_rollouts=2 x "
        r"rl.prompts_per_step=16\) and (\d+) of them scored alike, 0 of 16 groups with differing rewards ready: .*?rl\.temperature\)); goodput",
        last,
    )
    assert found is not None, out[-3000:]
    why, scored, alike = found.group(1), int(found.group(2)), int(found.group(3))
    assert scored == alike >= 32
    assert "Traceback" not in out
    summary = json.loads((tmp_path / "runs" / "alike" / "goodput.json").read_text())
    assert summary["outcome"] == f"stopped: {why}"
    assert summary["rl"]["trained"] == 0
    assert summary["rl"]["dropped_zero_advantage"] >= 32
    exits = [r["code"] for r in records(tmp_path, "alike") if r["event"] == "generator_exited"]
    assert set(exits) <= {0}  # told "done": none crashed (one that ends after the launcher's last look is not recorded)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_ctrl_c_ends_every_process_of_the_run_with_one_line(tmp_path: Path) -> None:
    proc = start(tmp_path, "interrupted", "run.steps=200", "checkpoint.every=2")
    wait_for_step(proc, tmp_path, "interrupted", 3)
    ranks = json.loads((tmp_path / "runs" / "interrupted" / "ranks.json").read_text())
    children = [pid for pids in ranks.values() for pid in pids]
    children += [r["pid"] for r in records(tmp_path, "interrupted") if r["event"] == "generator_started"]
    proc.send_signal(signal.SIGINT)  # the launcher alone (its own session): its children must not outlive it
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out[-3000:]
    assert "Traceback" not in out
    assert "KeyboardInterrupt" not in out
    last = out.splitlines()[-1]
    assert last.startswith(
        "train.py: run interrupted stopped by Ctrl-C (SIGINT), its processes ended; run the same command again to "
        "resume from its newest checkpoint (step "
    ), out[-3000:]
    until(lambda: not any(_alive(pid) for pid in children), 30, "every group and generator process ended")
    assert subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, check=False).stdout == b""
