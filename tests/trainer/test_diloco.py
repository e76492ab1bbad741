"""DiLoCo against DDP on the reference task: at least sync_every times fewer bytes, loss within 5%."""

from __future__ import annotations

from pathlib import Path

from tests.trainer.conftest import final, run

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
