"""The parts the training loop hands its decisions to: the checkpoint cadence, Progress and the Ledger."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from trainer.checkpoint import Checkpointer
from trainer.config import compose
from trainer.ft.manager import NoFaultTolerance
from trainer.loop.ledger import Ledger, Sync
from trainer.loop.progress import Progress, open_reports
from trainer.loop.trainer import Step
from trainer.observe.goodput import Goodput
from trainer.observe.runs import high_water, raise_high_water, read_events

from tests.trainer.conftest import CONFIG, overrides


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def progress(tmp_path: Path, rank: int = 0, target: int = 7) -> tuple[Progress, Goodput, Clock]:
    extra = ("ft.enabled=false", "ft.replica_groups=1", "run.metrics_port=-1", "run.log_every=3")
    cfg = compose(CONFIG, overrides(tmp_path, "loop", *extra))
    clock = Clock()
    goodput = Goodput(clock=clock)
    return Progress(cfg, 0, open_reports(cfg, 0, rank, goodput), goodput, NoFaultTolerance(), target), goodput, clock


def take(found: Progress, clock: Clock, seconds: float, counted: bool = True) -> None:
    found.step_begins()
    clock.now += seconds
    found.step_ends(Step(1, 1.0, None, counted, synced=counted), outer=0)


def test_an_inner_steps_time_is_booked_by_the_verdict_of_its_sync(tmp_path: Path) -> None:
    found, goodput, clock = progress(tmp_path)
    take(found, clock, 2.0, counted=False)  # DiLoCo skipped it: lost at once
    assert (goodput.seconds["failed_steps"], goodput.steps["failed"]) == (2.0, 1)
    take(found, clock, 3.0)
    take(found, clock, 1.0)
    assert goodput.seconds["productive"] == 0.0  # its fate is the next sync's
    found.settle(Sync(4, committed=True, replayed=False))
    assert (goodput.seconds["productive"], goodput.steps["committed"]) == (4.0, 2)
    take(found, clock, 5.0)
    found.settle(Sync(4, committed=False, replayed=False))
    assert (goodput.seconds["failed_steps"], goodput.steps["failed"]) == (7.0, 2)
    take(found, clock, 0.5)
    found.settle(Sync(5, committed=True, replayed=True))
    assert (goodput.seconds["replayed"], goodput.steps["replayed"]) == (0.5, 1)
    found.settle(Sync(6, committed=True, replayed=False))  # nothing pending: nothing booked twice
    assert goodput.seconds["productive"] == 4.0


def test_the_lead_logs_every_log_every_steps_and_the_last_and_raises_the_high_water_mark(tmp_path: Path) -> None:
    found, _, clock = progress(tmp_path, target=7)
    found.started(since=0.0, rank=0, step=0, resumed=None)
    for step in range(1, 8):
        clock.now += 1.0
        found.committed(step)
        found.maybe_log(step, loss=1.0 / step)
    log = read_events(tmp_path / "runs" / "loop", 0)
    assert [e["step"] for e in log if e["event"] == "commit"] == [1, 2, 3, 4, 5, 6, 7]
    logged = [e for e in log if e["event"] == "step"]
    assert [(e["step"], e["loss"]) for e in logged] == [(3, 0.3333), (6, 0.1667), (7, 0.1429)]
    assert logged[0]["tokens_per_s"] > 0
    assert high_water(found.cfg, 0) == 7


def test_another_rank_writes_its_own_events_and_leaves_the_high_water_mark_alone(tmp_path: Path) -> None:
    found, _, _ = progress(tmp_path, rank=1, target=3)
    found.committed(3)
    found.maybe_log(3, loss=1.0)
    assert read_events(tmp_path / "runs" / "loop", 0) == []
    lines = (tmp_path / "runs" / "loop" / "ranks" / "events-0-1.jsonl").read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["commit", "step"]
    assert high_water(found.cfg, 0) == -1


def test_a_sync_commits_when_the_committed_step_moves_on() -> None:
    ledger = Ledger(step=2, replays_up_to=4, fragments=0, target=10)
    assert ledger.sync(2) == Sync(2, committed=False, replayed=True)  # unchanged: the period was lost
    assert ledger.sync(3) == Sync(3, committed=True, replayed=True)
    assert ledger.sync(5) == Sync(5, committed=True, replayed=False)  # past the high-water mark: new work
    assert ledger.sync(5) == Sync(5, committed=False, replayed=False)


def test_each_fragment_is_recorded_at_its_last_sync_of_the_run() -> None:
    asked: list[int] = []

    def digest(fragment: int) -> str:
        asked.append(fragment)
        return f"d{fragment}"

    ledger = Ledger(step=0, replays_up_to=-1, fragments=2, target=6)
    for step in range(1, 7):
        ledger.record_fragment(step, digest)
    assert asked == [0, 1]  # steps 5 and 6 synced fragments 0 and 1 for the last time
    assert ledger.fragments == ["d0", "d1"]
    ddp = Ledger(step=0, replays_up_to=-1, fragments=0, target=6)
    ddp.record_fragment(6, digest)
    assert (ddp.fragments, asked) == ([], [0, 1])


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")
def test_the_checkpointer_keeps_its_cadence(tmp_path: Path) -> None:
    built: list[int] = []

    def state(step: int) -> Any:
        def build() -> dict[str, Any]:
            built.append(step)
            return {"w": torch.full((4,), float(step))}

        return build

    with Checkpointer(str(tmp_path / "ck"), every=3) as checkpoints:
        assert [s for s in range(1, 8) if checkpoints.should_save(s)] == [3, 6]
        for step in range(1, 8):
            blocked = checkpoints.maybe_save(step, state(step))
            if step not in (3, 6):
                assert blocked == 0.0  # nothing to wait for
        checkpoints.wait()
        assert checkpoints.committed() == [3, 6]
    assert built == [3, 6]  # the state is only built when it is saved
    with pytest.raises(ValueError, match="every must be at least 1, got 0"):
        Checkpointer(str(tmp_path / "ck"), every=0)


def test_diloco_logs_inner_steps_between_syncs_and_log_every_counts_inner_steps(tmp_path: Path) -> None:
    class Periods(NoFaultTolerance):
        inner_steps_per_commit = 5  # a sync every 5 inner steps

    found, _, clock = progress(tmp_path, target=4)  # run.log_every=3
    found.ft = Periods()
    for inner in range(1, 21):
        found.step_begins()
        clock.now += 1.0
        found.step_ends(Step(inner, 10.0 / inner, None, counted=True, synced=inner % 5 == 0), outer=(inner - 1) // 5)
    logged = read_events(tmp_path / "runs" / "loop", 0)
    assert [(e["step"], e["inner_step"]) for e in logged if e["event"] == "inner"] == [
        (0, 3),
        (1, 6),
        (1, 9),
        (2, 12),
        (3, 18),
    ]
    # Outer steps 1..4 hold inner steps 1-5, 6-10, 11-15, 16-20: each holds a multiple of 3.
    assert [s for s in range(1, 5) if found.should_log(s)] == [1, 2, 3, 4]
    found.cfg = compose(CONFIG, overrides(tmp_path, "loop", "run.log_every=12"))
    assert [s for s in range(1, 5) if found.should_log(s)] == [3, 4]  # inner 12 is in outer 3; 4 is the last


def test_a_group_killed_while_raising_its_high_water_mark_still_reads_the_last_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL between opening the progress file and writing it (seen under load: the restarted group then failed
    to read an empty file three times and the run failed): the last mark stays readable, the new one is lost."""
    found, _, _ = progress(tmp_path)
    raise_high_water(found.cfg, 0, 5)

    def killed_mid_write(path: Path, text: str, *args: Any, **kwargs: Any) -> int:
        path.open("w").close()  # opened for writing, so truncated: the process dies before its bytes land
        raise SystemExit("SIGKILL")

    monkeypatch.setattr(Path, "write_text", killed_mid_write)
    with pytest.raises(SystemExit):
        raise_high_water(found.cfg, 0, 6)
    monkeypatch.undo()
    assert high_water(found.cfg, 0) == 5
    raise_high_water(found.cfg, 0, 6)
    assert high_water(found.cfg, 0) == 6
