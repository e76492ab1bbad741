"""Checkpoints you can trust, through the driver: corrupt ones skipped, lost markers refused, NaN never committed."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from trainer.checkpoint import MARKER, step_dir
from trainer.config import compose

from tests.trainer.conftest import CONFIG, events, final, run, start

pytestmark = [
    pytest.mark.live,
    pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning"),
]  # each test runs the driver

ONE_GROUP = ("ft.replica_groups=1", "checkpoint.every=10", "run.log_every=5")


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def shard(tmp_path: Path, name: str, step: int) -> Path:
    return tmp_path / "checkpoints" / name / "group-0" / step_dir(step) / "__0_0.distcp"


def test_a_flipped_byte_resumes_from_the_newest_checkpoint_that_verifies(tmp_path: Path) -> None:
    run(tmp_path, "flip", "run.steps=30", *ONE_GROUP)
    flip_a_byte(shard(tmp_path, "flip", 30))

    run(tmp_path, "flip", "run.steps=40", *ONE_GROUP)
    log = events(tmp_path, "flip", 0)
    skipped = [e for e in log if e["event"] == "checkpoint_skipped"]
    assert [(e["group"], e["step"]) for e in skipped] == [(0, 30)]
    assert "does not match its sha256" in skipped[0]["reason"]
    assert [e["step"] for e in log if e["event"] == "resumed"] == [20]
    assert final(tmp_path, "flip", 0)["step"] == 40


def test_step_data_without_markers_is_refused_unless_start_over(tmp_path: Path) -> None:
    run(tmp_path, "lost", "run.steps=20", *ONE_GROUP)
    root = tmp_path / "checkpoints" / "lost"
    for marker in root.glob(f"group-*/step-*/{MARKER}"):
        marker.unlink()
    before = sorted(p.relative_to(root) for p in root.rglob("*"))

    proc = start(tmp_path, "lost", "run.steps=30", *ONE_GROUP)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2, out[-3000:]
    lines = [line for line in out.splitlines() if line.startswith("train.py:")]
    assert len(lines) == 1, out[-3000:]
    assert str(root) in lines[0]
    assert "checkpoint.start_over=true" in lines[0]
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before  # nothing touched
    assert sum(e["event"] == "started" for e in events(tmp_path, "lost", 0)) == 1  # only the first run's

    run(tmp_path, "lost", "run.steps=30", "checkpoint.start_over=true", *ONE_GROUP)
    log = events(tmp_path, "lost", 0)
    second = max(i for i, e in enumerate(log) if e["event"] == "started")
    assert log[second]["step"] == 0
    assert not any(e["event"] == "resumed" for e in log)
    assert final(tmp_path, "lost", 0)["step"] == 30


def test_a_directory_of_only_corrupt_checkpoints_is_refused(tmp_path: Path) -> None:
    import torch
    from trainer.checkpoint import Checkpointer
    from trainer.checkpoint.resume import start_refusal

    root = tmp_path / "ck"
    cfg = compose(CONFIG, ["run.name=x", f"checkpoint.dir={root}", "ft.replica_groups=2"])
    assert start_refusal(cfg) is None  # nothing there: a new run
    with Checkpointer(str(root / "group-1")) as checkpoints:
        checkpoints.save(10, {"w": torch.ones(1024)})
    assert start_refusal(cfg) is None
    flip_a_byte(root / "group-1" / step_dir(10) / "__0_0.distcp")
    refusal = start_refusal(cfg)
    assert refusal is not None
    assert refusal.startswith(
        f"checkpoint.dir {root}: step-* directories but no checkpoint that verifies (group-1 step 10"
    )
    start_over = compose(CONFIG, ["run.name=x", f"checkpoint.dir={root}", "checkpoint.start_over=true"])
    assert start_refusal(start_over) is None


def test_a_transient_nan_loss_is_never_committed_and_the_run_goes_on(tmp_path: Path) -> None:
    # Both groups' loss of step 5 is NaN once: the step is retried, not committed, in every group.
    # ft.min_replicas=2: both groups in every quorum, so neither can finish alone before the other joins.
    run(
        tmp_path, "blip", "run.steps=20", "ft.replica_groups=2", "ft.min_replicas=2", "checkpoint.every=10",
        "run.inject_nan_at_step=5",
    )  # fmt: skip
    for group in (0, 1):
        log = events(tmp_path, "blip", group)
        commits = [e["step"] for e in log if e["event"] == "commit"]
        assert commits == list(range(commits[0], 21))  # none skipped, none twice
        assert all(math.isfinite(e["loss"]) for e in log if e["event"] == "step")
        assert math.isfinite(final(tmp_path, "blip", group)["loss"])
    nonfinite = [e for g in (0, 1) for e in events(tmp_path, "blip", g) if e["event"] == "nonfinite"]
    assert any(e["step"] == 5 for e in nonfinite)
    # Which group sees which NaN depends on who is in the quorum (a group that is still healing, or
    # attempts step 5 later, gets the other's NaN through the all-reduce, labelled with its own batch):
    # two NaNs in all, so no group sees more than two in a row and none stops.
    for group in (0, 1):
        seen = [e["in_a_row"] for e in events(tmp_path, "blip", group) if e["event"] == "nonfinite"]
        assert len(seen) <= 2
        assert max(seen, default=0) <= 2
    assert final(tmp_path, "blip", 0)["weights"] == final(tmp_path, "blip", 1)["weights"]


def test_a_persistent_nan_loss_stops_the_run_with_exit_3_and_keeps_the_durable_checkpoint(tmp_path: Path) -> None:
    proc = start(
        tmp_path, "stuck", "run.steps=20", "ft.replica_groups=1", "checkpoint.every=5", "run.log_every=5",
        "run.inject_nan_at_step=7", "run.inject_nan_times=1000", "run.max_nonfinite_steps=3",
    )  # fmt: skip
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 3, out[-3000:]
    stops = [line for line in out.splitlines() if "stopping" in line and line.startswith("replica group 0:")]
    assert len(stops) == 1, out[-3000:]
    assert "3 attempts in a row (run.max_nonfinite_steps=3)" in stops[0]
    log = events(tmp_path, "stuck", 0)
    assert [(e["step"], e["in_a_row"]) for e in log if e["event"] == "nonfinite"] == [(7, 1), (7, 2), (7, 3)]
    assert [e["step"] for e in log if e["event"] == "commit"] == list(range(1, 7))
    assert sum(e["event"] == "started" for e in log) == 1  # final: the launcher did not restart it
    assert not any(e["event"] == "final" for e in log)
    group = tmp_path / "checkpoints" / "stuck" / "group-0"
    assert sorted(p.parent.name for p in group.glob(f"step-*/{MARKER}")) == [step_dir(5)]  # still there, durable
    assert sorted(p.name for p in group.iterdir()) == [step_dir(5)]


def test_diloco_skips_a_nan_inner_step_and_trains_on(tmp_path: Path) -> None:
    run(
        tmp_path, "dl", "run.steps=20", *ONE_GROUP, "optim=diloco", "optim.sync_every=5",
        "run.inject_nan_at_step=7", "run.inject_nan_times=2",
    )  # fmt: skip
    log = events(tmp_path, "dl", 0)
    assert [(e["step"], e["in_a_row"]) for e in log if e["event"] == "nonfinite"] == [(7, 1), (7, 2)]
    report = final(tmp_path, "dl", 0)
    assert report["inner_steps"] == 20
    assert math.isfinite(report["loss"])
    assert [e["step"] for e in log if e["event"] == "commit"] == [1, 2, 3, 4]
