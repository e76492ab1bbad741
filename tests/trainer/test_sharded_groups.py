"""Sharded replica groups on CPU: 2 groups x 2 ranks (FSDP2 inside a group, torchft across groups)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from trainer.checkpoint import MARKER, step_dir
from trainer.config import compose
from trainer.launch.local import launch

from tests.trainer.conftest import CONFIG, events, final, kill_and_finish, overrides, run, start, wait_for

pytestmark = pytest.mark.live  # each test launches the driver's sharded groups

STEPS = 160
SHAPE = ("ft.replica_groups=2", "ft.group_size=2", "data.batch_size=8")
# Streaming DiLoCo: 2 fragments, one synced every 4 inner steps (the pseudo-gradient sent 1 step early).
STREAMING = ("optim=streaming_diloco", "optim.sync_every=8", "ft.min_replicas=2", "checkpoint.every=1000", *SHAPE)


def test_a_killed_rank_takes_its_group_down_and_the_group_heals(tmp_path: Path) -> None:
    name = "shardkill"
    proc = start(tmp_path, name, f"run.steps={STEPS}", "checkpoint.every=1000", "ft.restart_delay_s=2", *SHAPE)
    wait_for(proc, tmp_path, name, "step", 20, within_s=240)
    killed_at = kill_and_finish(proc, tmp_path, name, 1, timeout=400)  # rank 1 of group 1, and with it rank 0

    survivor = [e for e in events(tmp_path, name, 0) if e["event"] == "commit"]
    steps = [e["step"] for e in survivor]
    assert steps == list(range(steps[0], STEPS + 1))  # none lost, none repeated, never back
    assert any(e["participants"] == 1 and e["time"] > killed_at for e in survivor)  # it went on alone

    replaced = events(tmp_path, name, 1)
    assert len([e for e in replaced if e["event"] == "started"]) == 2  # the group as a whole started again
    assert any(e["event"] == "healed" and e["time"] > killed_at for e in replaced)
    other = [e["step"] for e in replaced if e["event"] == "commit"]
    assert other == sorted(set(other))
    assert final(tmp_path, name, 0)["step"] == final(tmp_path, name, 1)["step"] == STEPS
    # The digest of the full (gathered) state dict: every shard of both groups agrees after healing.
    assert final(tmp_path, name, 1)["weights"] == final(tmp_path, name, 0)["weights"]
    summary = json.loads((tmp_path / "runs" / name / "goodput.json").read_text())
    assert summary["restarts"] == 1


def _since_last_start(tmp_path: Path, name: str, group: int) -> list[dict[str, object]]:
    log = events(tmp_path, name, group)
    return log[max(i for i, e in enumerate(log) if e["event"] == "started") - 1 :]


def test_a_2x2_checkpoint_resumes_onto_1x2_and_2x1(tmp_path: Path) -> None:
    """DCP reshards on load: each rank of the new shape reads its own part of what 2x2 ranks wrote."""
    name = "reshard"
    run(tmp_path, name, "run.steps=20", "checkpoint.every=10", *SHAPE)
    saved = final(tmp_path, name, 0)["weights"]
    files = sorted(p.name for p in (tmp_path / "checkpoints" / name / "group-0" / step_dir(20)).iterdir())
    assert files == [".metadata", MARKER, "__0_0.distcp", "__1_0.distcp"]  # one file of shards per rank

    # Onto one group of two ranks, nothing left to train: train.py says so and stops; the launcher itself
    # (past that check) loads the checkpoint, and the gathered weights are exactly the saved ones.
    onto = ("run.steps=20", "ft.replica_groups=1", "ft.group_size=2", "data.batch_size=8")
    assert "nothing to do: run reshard already completed step 20 of 20" in run(tmp_path, name, *onto)
    assert launch(compose(CONFIG, overrides(tmp_path, name, *onto))) == 0
    resumed = _since_last_start(tmp_path, name, 0)
    assert [e["step"] for e in resumed if e["event"] == "resumed"] == [20]
    assert final(tmp_path, name, 0)["weights"] == saved

    # Onto two unsharded groups, and on: both resume at step 20, train to 26 and agree.
    run(tmp_path, name, "run.steps=26", "ft.replica_groups=2", "ft.group_size=1", "data.batch_size=8")
    for group in (0, 1):
        log = _since_last_start(tmp_path, name, group)
        assert [e["step"] for e in log if e["event"] == "resumed"] == [20]
        assert [e["step"] for e in log if e["event"] == "commit"] == list(range(21, 27))
    assert final(tmp_path, name, 0)["weights"] == final(tmp_path, name, 1)["weights"]


def test_diloco_on_sharded_groups_leaves_every_group_identical(tmp_path: Path) -> None:
    """torchft's DiLoCo on FSDP2 shards: each rank's outer step averages its shards' pseudo-gradients."""
    name = "sharddiloco"
    run(
        tmp_path, name, "run.steps=40", "optim=diloco", "optim.sync_every=8", "ft.min_replicas=2",
        "checkpoint.every=1000", *SHAPE,
    )  # fmt: skip
    reports = [final(tmp_path, name, g) for g in (0, 1)]
    assert [(r["step"], r["inner_steps"]) for r in reports] == [(5, 40), (5, 40)]
    assert reports[0]["weights"] == reports[1]["weights"]  # gathered: every shard of both groups agrees
    assert all(e["participants"] == 2 for e in events(tmp_path, name, 0) if e["event"] == "commit")


def _fragments_agree(tmp_path: Path, name: str, steps: int) -> list[dict[str, Any]]:
    """Both groups finished at `steps` committed steps and every fragment was identical at its last sync."""
    reports = [final(tmp_path, name, g) for g in (0, 1)]
    assert [(r["step"], r["inner_steps"]) for r in reports] == [(steps, steps * 4)] * 2
    assert None not in reports[0]["fragments"]
    assert len(set(reports[0]["fragments"])) == 2
    assert reports[0]["fragments"] == reports[1]["fragments"]  # gathered: every shard of both groups agrees
    return reports


def test_streaming_diloco_on_sharded_groups_syncs_every_fragment_identically(tmp_path: Path) -> None:
    """Each fragment is identical across groups after its own sync; the whole model never is at once."""
    name = "shardstream"
    run(tmp_path, name, "run.steps=40", *STREAMING)
    reports = _fragments_agree(tmp_path, name, 10)
    # By design (torchft's fragment_update_alpha=0): the fragment synced at step 9 took 4 more local inner
    # steps on each group's own batches, so the whole model differs between groups at the end.
    assert reports[0]["weights"] != reports[1]["weights"]
    assert all(e["participants"] == 2 for e in events(tmp_path, name, 0) if e["event"] == "commit")


def test_a_killed_rank_in_streaming_diloco_heals_its_group_mid_period(tmp_path: Path) -> None:
    """The survivor waits for the quorum (min_replicas 2); the restarted group heals from it mid-period."""
    name = "shardstreamkill"
    proc = start(tmp_path, name, "run.steps=64", "ft.restart_delay_s=2", *STREAMING)
    wait_for(proc, tmp_path, name, "commit", 4, within_s=240)
    killed_at = kill_and_finish(proc, tmp_path, name, 1, timeout=400)  # rank 1 of group 1, and with it rank 0

    replaced = events(tmp_path, name, 1)
    assert len([e for e in replaced if e["event"] == "started"]) == 2
    assert any(e["event"] == "healed" and e["time"] > killed_at for e in replaced)
    _fragments_agree(tmp_path, name, 16)
    for group in (0, 1):
        commits = [e["step"] for e in events(tmp_path, name, group) if e["event"] == "commit"]
        assert commits == sorted(set(commits))  # never back, never twice
    assert [e["step"] for e in events(tmp_path, name, 0) if e["event"] == "commit"] == list(range(1, 17))
