"""DiLoCo against DDP on the reference task (at least sync_every times fewer bytes, loss within 5%), and healing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.conftest import events, final, kill_and_finish, run, start, wait_for

pytestmark = pytest.mark.live  # each test runs the driver

COMMON = ("run.steps=240", "ft.replica_groups=2", "ft.min_replicas=2", "checkpoint.every=100000")


def test_diloco_sends_sync_every_times_fewer_bytes_at_ddp_quality(tmp_path: Path) -> None:
    run(tmp_path, "ddp", *COMMON, "optim=ddp")
    run(tmp_path, "diloco", *COMMON, "optim=diloco", "optim.sync_every=20")
    ddp = [final(tmp_path, "ddp", g) for g in (0, 1)]
    diloco = [final(tmp_path, "diloco", g) for g in (0, 1)]
    assert ddp[0]["inner_steps"] == diloco[0]["inner_steps"] == 240
    ratio = ddp[0]["bytes_sent"] / diloco[0]["bytes_sent"]
    assert ratio >= 20, ratio
    assert diloco[0]["weights"] == diloco[1]["weights"]  # the outer step leaves every group identical
    assert diloco[0]["loss"] <= ddp[0]["loss"] * 1.05, (diloco[0]["loss"], ddp[0]["loss"])


def test_a_killed_diloco_group_heals_and_finishes_with_the_survivors_weights(tmp_path: Path) -> None:
    # A healing DiLoCo group takes the survivor's model, optimizers, saved parameters and place in the
    # sync period (the data position), in the middle of an inner step.
    proc = start(
        tmp_path, "heal", "run.steps=300", "optim=diloco", "optim.sync_every=10", "ft.replica_groups=2",
        "checkpoint.every=100000", "ft.restart_delay_s=2",
    )  # fmt: skip
    wait_for(proc, tmp_path, "heal", "commit", 8, within_s=180)
    killed_at = kill_and_finish(proc, tmp_path, "heal", 1, timeout=300)
    assert any(e["event"] == "healed" and e["time"] > killed_at for e in events(tmp_path, "heal", 1))
    reports = [final(tmp_path, "heal", g) for g in (0, 1)]
    assert [(r["step"], r["inner_steps"]) for r in reports] == [(30, 300), (30, 300)]
    assert reports[0]["weights"] == reports[1]["weights"]
    for group in (0, 1):
        commits = [e["step"] for e in events(tmp_path, "heal", group) if e["event"] == "commit"]
        assert commits == sorted(set(commits))  # never back, never twice
