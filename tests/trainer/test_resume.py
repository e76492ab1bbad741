"""Resume through the driver: always the newest durable checkpoint, never a staged-only one; a rerun whose
checkpoint dir is read-only fails at once, without the earlier run's figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from trainer.checkpoint import MARKER, step_dir

from tests.trainer.conftest import CONFIG, TRAIN, events, final, overrides, run
from tests.trainer.test_preconditions import unwritable

pytestmark = pytest.mark.live  # the driver, crashed and resumed


def test_a_crash_between_staged_and_durable_resumes_from_the_previous_durable_checkpoint(tmp_path: Path) -> None:
    common = ("ft.replica_groups=1", "checkpoint.every=20", "run.log_every=10")
    run(tmp_path, "resume", "run.steps=60", *common)
    first = [e["step"] for e in events(tmp_path, "resume", 0) if e["event"] == "checkpoint_durable"]
    assert first == [20, 40, 60]
    staged_only = tmp_path / "checkpoints" / "resume" / "group-0" / step_dir(60)
    (staged_only / MARKER).unlink()  # the process died after staging step 60, before its marker

    run(tmp_path, "resume", "run.steps=80", *common)
    log = events(tmp_path, "resume", 0)
    resumed = [e for e in log if e["event"] == "resumed"]
    assert [e["step"] for e in resumed] == [40]  # not 60: it was never durable
    second_start = max(i for i, e in enumerate(log) if e["event"] == "started")
    assert log[second_start]["step"] == 40
    report = final(tmp_path, "resume", 0)
    assert report["step"] == 80
    steps = report["goodput"]["steps"]
    assert steps["replayed"] == 20  # steps 41-60 were done before and lost with the crash
    assert steps["committed"] == 20  # 61-80 are new work
    summary = json.loads((tmp_path / "runs" / "resume" / "goodput.json").read_text())
    assert summary["seconds"]["replayed"] > 0
    assert summary["seconds"]["checkpoint"] > 0
    # The final metrics, written with the client library at the end of the run.
    final_metrics = (tmp_path / "runs" / "resume" / "goodput-0.prom").read_text()
    replayed = [
        s.value
        for family in text_string_to_metric_families(final_metrics)
        for s in family.samples
        if s.name == "meridian_trainer_goodput_seconds_total" and s.labels["category"] == "replayed"
    ]
    assert replayed
    assert replayed[0] > 0


def test_the_driver_fails_at_once_on_a_read_only_checkpoint_dir_without_an_old_goodput(tmp_path: Path) -> None:
    run(tmp_path, "again", "run.steps=10", "ft.replica_groups=1", "checkpoint.every=5")  # an earlier, finished run
    path = unwritable(tmp_path, "read-only")
    command = [
        sys.executable,
        str(TRAIN),
        str(CONFIG),
        *overrides(tmp_path, "again", "run.steps=20"),
        f"checkpoint.dir={path}",
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 2
    assert result.stdout == ""  # no goodput line, no earlier run's figures
    assert result.stderr.startswith(f"train.py: checkpoint.dir: {path} is not writable (")
    assert len(result.stderr.strip().splitlines()) == 1
