"""Live fault tolerance on CPU (gloo): a replica group SIGKILLed mid-run, the others continue, it heals."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from tests.trainer.conftest import events, final, start


def test_a_killed_replica_group_heals_and_no_committed_step_is_lost(tmp_path: Path) -> None:
    name = "kill"
    proc = start(tmp_path, name, "run.steps=160", "checkpoint.every=1000", "ft.replica_groups=2")
    deadline = time.monotonic() + 180
    while not any(e["event"] == "step" and e["step"] >= 40 for e in events(tmp_path, name, 1)):
        assert proc.poll() is None, "the run ended before step 40"
        assert time.monotonic() < deadline, "the run never reached step 40"
        time.sleep(0.2)
    pids = json.loads((tmp_path / "runs" / name / "pids.json").read_text())
    os.kill(pids["1"], signal.SIGKILL)
    killed_at = time.time()
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]

    survivor = [e for e in events(tmp_path, name, 0) if e["event"] == "step"]
    steps = [e["step"] for e in survivor]
    assert steps == sorted(steps)  # committed steps never go back
    assert len(set(steps)) == len(steps)
    assert any(e["participants"] == 1 and e["time"] > killed_at for e in survivor)  # it shrank and went on
    assert final(tmp_path, name, 0)["step"] == 160

    replaced = events(tmp_path, name, 1)
    restarts = [e for e in replaced if e["event"] == "started"]
    assert len(restarts) == 2  # the first process, and the one the launcher started after the kill
    assert any(e["event"] == "healed" and e["time"] > killed_at for e in replaced)
    assert final(tmp_path, name, 1)["step"] == 160
    assert final(tmp_path, name, 1)["weights"] == final(tmp_path, name, 0)["weights"]  # identical after healing

    summary = json.loads((tmp_path / "runs" / name / "goodput.json").read_text())
    assert summary["restarts"] == 1
    assert 0 < summary["goodput"] < 1
    assert summary["seconds"]["startup"] > 0
