"""What an RL run shows: the step line, the generators' time by state, and the summary that merges it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from trainer.observe.console import outcome_line
from trainer.observe.goodput import Goodput, combine
from trainer.rl.report import (
    GeneratorTime,
    StepReport,
    TrainerTime,
    combine_generators,
    generators_line,
    step_line,
    trainer_line,
    with_generators,
)
from trainer.rl.stats import Lengths, PolicyStats

REPORT = StepReport(
    step=12,
    steps=200,
    reward=0.4125,
    greedy=0.73,
    version=11,
    ages=(0, 1, 1, 0, 0),
    generated_tokens=24_680,
    trained_tokens=11_356,
    generate_seconds=20.0,
    train_seconds=2.0,
    sync_seconds=0.0123,
    reissued=3,
)


def test_the_step_line_shows_every_field() -> None:
    assert step_line(REPORT) == (
        "rl step 12/200  reward 0.41  greedy 0.73  version 11  age max 1 mean 0.4  gen 1,234 tok/s"
        "  train 5,678 tok/s  sync 0.012 s  reissued 3"
    )


POLICY = PolicyStats(
    clip_fraction=0.031, dual_clip_fraction=0.0, ratio_mean=1.0012, ratio_max=1.84, entropy=1.234, kl=0.00123,
    kl_against="sampler", kl_sampler=0.00123, tokens=6_300, shares=2, expected=2,
)  # fmt: skip
LENGTHS = Lengths(completions=512, tokens=6_300, mean=12.3, max=32, truncated=0.04)


def test_the_step_line_shows_what_training_did_to_the_whole_batch() -> None:
    line = step_line(dataclasses.replace(REPORT, policy=POLICY, lengths=LENGTHS, reissued=0))
    assert line.endswith(
        "sync 0.012 s  clip 3.1%  ratio 1.00 max 1.84  entropy 1.23  kl gen 0.0012  len 12.3 max 32  truncated 4%"
    )
    with_ref = dataclasses.replace(POLICY, kl=0.5, kl_against="reference", shares=1)
    assert "kl ref 0.5000  of 1/2 groups  len" in step_line(
        dataclasses.replace(REPORT, policy=with_ref, lengths=LENGTHS)
    )


def test_the_step_line_leaves_out_what_did_not_happen() -> None:
    quiet = dataclasses.replace(REPORT, greedy=None, reissued=0)
    assert "greedy" not in step_line(quiet)
    assert "reissued" not in step_line(quiet)
    assert step_line(quiet).endswith("sync 0.012 s")


def test_the_step_line_survives_a_surplus_batch_and_no_measured_time() -> None:
    """NaN reward (the batch was earlier rollouts' surplus), no groups, zero seconds: n/a, never a crash."""
    empty = dataclasses.replace(REPORT, reward=float("nan"), ages=(), generate_seconds=0.0, train_seconds=0.0)
    line = step_line(empty)
    assert "reward n/a" in line
    assert "age n/a" in line
    assert "gen n/a tok/s  train n/a tok/s" in line


def test_generator_time_books_each_block_to_its_state() -> None:
    now = [0.0]
    heard: list[tuple[str, float]] = []
    time = GeneratorTime(clock=lambda: now[0], observer=lambda state, s: heard.append((state, s)))
    with time.timed("generating"):
        now[0] += 6.0

    def sync_fails() -> None:
        with time.timed("syncing"):
            now[0] += 1.0
            raise RuntimeError("the trainer went away")

    with pytest.raises(RuntimeError):
        sync_fails()  # the time is booked anyway
    time.add("waiting", 1.0)
    assert time.report() == {
        "seconds": {"generating": 6.0, "syncing": 1.0, "waiting": 1.0},
        "total_seconds": 8.0,
        "generating": 0.75,
    }
    assert heard == [("generating", 6.0), ("syncing", 1.0), ("waiting", 1.0)]


def test_generator_time_refuses_unknown_states_and_negative_seconds() -> None:
    time = GeneratorTime(clock=lambda: 0.0)
    with pytest.raises(ValueError, match="'idle' is not one of generating, syncing, waiting"):
        time.add("idle", 1.0)
    with pytest.raises(ValueError, match="'idle'"), time.timed("idle"):
        pass
    with pytest.raises(ValueError, match="negative"):
        time.add("waiting", -1.0)
    assert time.report()["total_seconds"] == 0.0
    assert time.report()["generating"] == 0.0  # no time yet: no share, no division by zero


def _generator(generating: float, syncing: float, waiting: float) -> dict[str, object]:
    time = GeneratorTime(clock=lambda: 0.0)
    for state, seconds in (("generating", generating), ("syncing", syncing), ("waiting", waiting)):
        time.add(state, seconds)
    return time.report()


def test_generators_combine_by_summing_their_seconds() -> None:
    combined = combine_generators([_generator(8.0, 1.0, 1.0), _generator(4.0, 1.0, 5.0)])
    assert combined == {
        "seconds": {"generating": 12.0, "syncing": 2.0, "waiting": 6.0},
        "total_seconds": 20.0,
        "generating": 0.6,
        "generator_reports": 2,
    }
    assert generators_line(combined) == (
        "generators: 60.0% generating (12.0s of 20.0s; syncing 2.0s, waiting 6.0s) over 2 generator(s)"
    )
    assert combine_generators([])["generator_reports"] == 0
    assert generators_line(combine_generators([])) == "generators: n/a (no generator reported)"


def test_the_summary_keeps_the_trainers_goodput_and_adds_the_generators(tmp_path: Path) -> None:
    trainer = Goodput(clock=lambda: 0.0)
    trainer.add("startup", 1.0)
    trainer.step(3.0, committed=True, replayed=False)
    summary = combine([trainer.report()])
    merged = with_generators(summary, [_generator(3.0, 0.5, 0.5)])
    assert {k: v for k, v in merged.items() if k != "generators"} == summary  # the trainer's part as it was
    assert "generators" not in summary  # a copy: the caller's summary untouched
    assert merged["generators"]["generating"] == 0.75
    line = outcome_line("r", "completed", merged, tmp_path)
    assert line == (
        "run r completed; goodput r: 75.0% over 1 replica group report(s); generators: 75.0% generating "
        f"(3.0s of 4.0s; syncing 0.5s, waiting 0.5s) over 1 generator(s); logs in {tmp_path}"
    )
    assert "generators" not in outcome_line("r", "completed", summary, tmp_path)  # a run that is not RL


def test_the_trainers_time_splits_training_from_waiting_for_batches() -> None:
    time = TrainerTime()
    assert trainer_line(time.report()) == "trainer: n/a (no step committed)"
    time.add(training=3.0, waiting=1.0)
    time.add(training=3.0, waiting=0.0)
    assert time.report() == {"seconds": {"training": 6.0, "waiting": 1.0}, "steps": 2, "training": 0.8571}
    assert (
        trainer_line(time.report()) == "trainer: 85.7% training (6.0s of 7.0s; waiting for batches 1.0s) over 2 step(s)"
    )
    with pytest.raises(ValueError, match="negative"):
        time.add(training=-1.0, waiting=0.0)


def test_the_final_line_has_the_groups_goodput_the_trainers_training_share_and_the_generators(tmp_path: Path) -> None:
    trainer = Goodput(clock=lambda: 0.0)
    trainer.step(4.0, committed=True, replayed=False)
    time = TrainerTime()
    time.add(training=3.0, waiting=1.0)
    summary = with_generators(combine([trainer.report()]), [_generator(3.0, 0.5, 0.5)]) | {"trainer": time.report()}
    line = outcome_line("r", "completed", summary, tmp_path)
    assert line == (
        "run r completed; goodput r: 100.0% over 1 replica group report(s); "
        "trainer: 75.0% training (3.0s of 4.0s; waiting for batches 1.0s) over 1 step(s); "
        "generators: 75.0% generating (3.0s of 4.0s; syncing 0.5s, waiting 0.5s) over 1 generator(s); "
        f"logs in {tmp_path}"
    )
