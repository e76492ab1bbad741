"""Live fault tolerance on CPU (gloo): a replica group SIGKILLed mid-run, the others continue, it heals; and a run
with fault tolerance off trains, checkpoints and resumes without torchft, in process and through the driver."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from trainer.observe.runs import final_event, read_events

from tests.trainer.conftest import events, final, kill_and_finish, run, start, wait_for
from tests.trainer.test_trainer import config

pytestmark = pytest.mark.live  # the driver, killed and healed

STEPS = 400


def test_a_killed_replica_group_heals_and_no_committed_step_is_lost(tmp_path: Path) -> None:
    name = "kill"
    # The replacement starts one heartbeat timeout (2 s) after the death: by then the Lighthouse
    # has dropped the dead group and the survivor commits alone; 360 steps remain for it to heal.
    proc = start(
        tmp_path, name, f"run.steps={STEPS}", "checkpoint.every=1000", "ft.replica_groups=2", "ft.restart_delay_s=2"
    )
    wait_for(proc, tmp_path, name, "step", 40, within_s=180)
    killed_at = kill_and_finish(proc, tmp_path, name, 1, timeout=300)

    # Every committed step is recorded with its participants. The survivor (which may have
    # joined late and healed first) commits every step from its first to the last, one by one.
    survivor = [e for e in events(tmp_path, name, 0) if e["event"] == "commit"]
    steps = [e["step"] for e in survivor]
    assert steps == list(range(steps[0], STEPS + 1))  # none lost, none repeated, never back
    assert {e["participants"] for e in survivor} <= {1, 2}
    assert any(e["participants"] == 1 for e in survivor)  # it shrank and went on alone
    assert final(tmp_path, name, 0)["step"] == STEPS
    other = [e["step"] for e in events(tmp_path, name, 1) if e["event"] == "commit"]
    assert other == sorted(set(other))  # the replaced group's steps only go forward, across its restart
    assert set(steps) | set(other) == set(range(1, STEPS + 1))  # between them, every step was committed

    replaced = events(tmp_path, name, 1)
    restarts = [e for e in replaced if e["event"] == "started"]
    assert len(restarts) == 2  # the first process, and the one the launcher started after the kill
    assert any(e["event"] == "healed" and e["time"] > killed_at for e in replaced)
    assert final(tmp_path, name, 1)["step"] == STEPS
    assert final(tmp_path, name, 1)["weights"] == final(tmp_path, name, 0)["weights"]  # identical after healing

    summary = json.loads((tmp_path / "runs" / name / "goodput.json").read_text())
    assert summary["restarts"] == 1
    assert 0 < summary["goodput"] < 1
    assert summary["seconds"]["startup"] > 0


def test_fault_tolerance_off_runs_through_the_driver(tmp_path: Path) -> None:
    out = run(tmp_path, "solo", "ft.enabled=false", "ft.replica_groups=1", "run.steps=10", "checkpoint.every=5")
    assert "over 1 replica group report" in out
    log = read_events(tmp_path / "runs" / "solo", 0)
    assert [e["step"] for e in log if e["event"] == "commit"] == list(range(1, 11))
    assert not (tmp_path / "runs" / "solo" / "lighthouse").read_text()  # no Lighthouse was started


@pytest.fixture
def no_torchft(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any import of torchft fails: nothing of it can be constructed."""
    for name in [m for m in sys.modules if m == "torchft" or m.startswith("torchft.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "torchft", None)


def test_fault_tolerance_off_trains_checkpoints_and_resumes_without_torchft(tmp_path: Path, no_torchft: None) -> None:
    from trainer.loop.worker import train

    with pytest.raises(ImportError):
        import torchft  # noqa: F401
    cfg = config(tmp_path, "run.steps=6", "checkpoint.every=3", "run.log_every=3")
    report = train(cfg, 0, "")
    assert (report["step"], report["inner_steps"], report["bytes_sent"]) == (6, 6, 0)
    log = read_events(tmp_path / "runs" / "unit", 0)
    assert [e["step"] for e in log if e["event"] == "commit"] == [1, 2, 3, 4, 5, 6]
    assert [e["participants"] for e in log if e["event"] == "step"] == [1, 1]
    assert [e["step"] for e in log if e["event"] == "checkpoint_durable"] == [3, 6]

    train(config(tmp_path, "run.steps=9", "checkpoint.every=3", "run.log_every=3"), 0, "")
    log = read_events(tmp_path / "runs" / "unit", 0)
    assert [e["step"] for e in log if e["event"] == "resumed"] == [6]
    assert [e["step"] for e in log if e["event"] == "commit"][-3:] == [7, 8, 9]
    assert final_event(tmp_path / "runs" / "unit", 0)["inner_steps"] == 9  # type: ignore[index]
