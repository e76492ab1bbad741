"""Held-out evaluation in the distributed run (rl/evaluation.py): only rank 0 of the group whose report of the step
came first evaluates, on the snapshot, on a thread; the launcher's step line waits for it and carries it."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families
from trainer.config import Config, Model, compose
from trainer.model.transformer import LanguageModel
from trainer.rl.controller import Committed, Window
from trainer.rl.evaluation import Evaluation, due, evaluates
from trainer.rl.generate import snapshot
from trainer.rl.grpo import greedy_accuracy, make_task
from trainer.rl.launch import RLSide
from trainer.rl.stats import Lengths

from contract.metrics import RL
from telemetry.exposition import render
from tests.conftest import REPO

GRPO = REPO / "platform/trainer/configs/grpo.yaml"


def _config(*overrides: str) -> Config:
    return compose(GRPO, ["run.name=x", "run.steps=8", "rl.eval_every=4", "model.precision=fp32", *overrides])


def test_only_rank_0_of_the_first_reporting_group_evaluates_and_only_due_steps() -> None:
    assert [s for s in range(1, 9) if due(s, every=4, last=8)] == [4, 8]
    assert [s for s in range(1, 11) if due(s, every=4, last=10)] == [4, 8, 10]  # the last step, due or not
    places = [(rank, first) for rank in (0, 1) for first in (True, False)]
    assert [p for p in places if evaluates(*p, step=4, every=4, last=8)] == [(0, True)]
    assert not any(evaluates(*p, step=5, every=4, last=8) for p in places)


def test_the_evaluation_scores_the_snapshot_on_its_own_thread(tiny: Model) -> None:
    cfg = _config()
    task = make_task(cfg.rl, tiny.vocab)
    torch.manual_seed(0)
    policy = LanguageModel(tiny)
    reports: list[tuple[int, float, str]] = []
    evaluation = Evaluation(
        tiny, task, lambda step, acc, s: reports.append((step, acc, threading.current_thread().name))
    )
    weights = snapshot(policy)
    evaluation.submit(4, weights)
    evaluation.submit(8, weights)  # waits for the one before: one at a time, in order
    evaluation.wait()
    want = greedy_accuracy(policy, task.prompts.held_out, task)
    assert reports == [(4, want, "evaluation-4"), (8, want, "evaluation-8")]
    assert all(torch.equal(weights[n], t) for n, t in policy.state_dict().items())  # read, never written


def test_a_failed_evaluation_is_a_warning_not_a_crash(tiny: Model, caplog: pytest.LogCaptureFixture) -> None:
    reports: list[int] = []
    evaluation = Evaluation(tiny, make_task(_config().rl, tiny.vocab), lambda step, acc, s: reports.append(step))
    evaluation.submit(4, {"embed.weight": torch.zeros(1)})  # not the model's weights
    evaluation.wait()
    assert reports == []
    assert "evaluation of step 4 failed: RuntimeError" in caplog.text


def _gauge(side: RLSide, name: str) -> float:
    [value] = [
        sample.value
        for family in text_string_to_metric_families(render(side.metrics.registry))
        for sample in family.samples
        if sample.name == name
    ]
    return value


def _committed(step: int) -> Committed:
    measured = Lengths(completions=10, tokens=10, mean=1.0, max=1, truncated=0.0)
    return Committed(step=step, ages=(0,), reward=0.5, window=Window(), trainer={}, lengths=measured)


def test_a_due_steps_line_waits_for_its_accuracy_and_carries_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    side = RLSide(_config(), tmp_path)
    try:
        for step in (3, 4):
            side._committed(_committed(step))
        assert [line.split()[2] for line in capsys.readouterr().out.splitlines()] == ["3/8"]  # 4 is due: it waits
        side._evaluated(0, 4, 0.75, 0.01)
        side._committed(_committed(5))
        lines = capsys.readouterr().out.splitlines()
        assert [line.split()[2] for line in lines] == ["4/8", "5/8"]
        assert "greedy 0.75" in lines[0]
        assert "greedy" not in lines[1]
        side._committed(_committed(8))  # due; its evaluation never comes (its group died): shown at the end
        side._evaluated(0, 4, 0.5, 0.01)  # a second report of an earlier step: its own line, never a step's
        assert capsys.readouterr().out.splitlines() == ["rl greedy 0.50 at step 4 (group 0, 0.01 s)"]
        assert _gauge(side, RL.greedy_accuracy.name) == 0.5  # a late one reaches the dashboard too
    finally:
        side.finish({})
    assert [line.split()[2] for line in capsys.readouterr().out.splitlines()] == ["8/8"]
    records = [json.loads(line) for line in (tmp_path / "rl.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["event"] == "step"] == [3, 4, 5, 8]
    assert [(r["step"], r["greedy"]) for r in records if r["event"] == "step"][1] == (4, 0.75)
    assert [(r["step"], r["group"]) for r in records if r["event"] == "greedy"] == [(4, 0), (4, 0)]
