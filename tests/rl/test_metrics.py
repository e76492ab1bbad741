"""An RL run's live metrics: the exposition holds contract.metrics.RL with the step reports' values."""

from __future__ import annotations

import dataclasses

import pytest
from prometheus_client.parser import text_string_to_metric_families
from trainer.observe.goodput import Goodput
from trainer.observe.metrics import RunMetrics
from trainer.rl.metrics import RLMetrics
from trainer.rl.report import GeneratorTime, StepReport
from trainer.rl.stats import Lengths, PolicyStats

from contract import metrics
from contract.metrics import RL, TRAINER
from telemetry.exposition import check, render, table
from tests.conftest import REPO

LABELS = {"run": "r", "region": "europe-west4", "group": "0"}

REPORT = StepReport(
    step=5,
    steps=100,
    reward=0.5,
    greedy=0.25,
    version=4,
    ages=(0, 1, 1, 2),  # one past the bound of 1: the counter must show it
    generated_tokens=300,
    trained_tokens=120,
    generate_seconds=3.0,
    train_seconds=1.0,
    sync_seconds=0.02,
    reissued=2,
)


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of an exposition as (name, labels) -> value, parsed by the client library's parser."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(text: str, name: str, **extra: str) -> float:
    return _samples(text)[(name, frozenset((LABELS | extra).items()))]


def test_the_exposition_holds_the_catalog_from_the_start() -> None:
    live = RLMetrics("r", "europe-west4", 0, max_policy_age=1)
    text = render(live.registry)
    assert check(metrics.RL, text) == []
    assert _value(text, RL.stale_trained.name) == 0.0  # the bound's series exists before anything went wrong


def test_step_reports_and_generator_time_become_series() -> None:
    live = RLMetrics("r", "europe-west4", 0, max_policy_age=1)
    live.observe(REPORT)
    live.evaluated(0.25)  # an evaluation sets the accuracy when it arrives, whichever step's line it joins
    later = dataclasses.replace(REPORT, step=6, version=5, reward=float("nan"), greedy=None, ages=(0,), reissued=0)
    live.observe(later)  # all surplus: the reward and the accuracy keep their last values
    time = GeneratorTime(clock=lambda: 0.0, observer=lambda state, s: live.generator(state, s, "gen-1"))
    time.add("generating", 4.0)
    time.add("waiting", 0.5)
    time.add("generating", 2.0)
    text = render(live.registry)
    assert check(metrics.RL, text) == []
    assert _value(text, RL.reward_mean.name) == 0.5
    assert _value(text, RL.greedy_accuracy.name) == 0.25
    assert _value(text, RL.policy_version.name) == 6
    assert _value(text, RL.stale_trained.name) == 1.0
    assert _value(text, RL.reissued.name) == 2.0
    assert _value(text, RL.generated_tokens.name) == 600.0
    assert _value(text, RL.trained_tokens.name) == 240.0
    age = RL.sample_age.name
    assert _value(text, f"{age}_count") == 5
    assert _value(text, f"{age}_sum") == 4
    assert [_value(text, f"{age}_bucket", le=le) for le in ("0.0", "1.0", "2.0", "+Inf")] == [2, 4, 5, 5]
    assert _value(text, f"{RL.weight_sync_seconds.name}_count") == 2
    seconds = RL.generator_seconds.name
    assert _value(text, seconds, generator="gen-1", state="generating") == 6.0
    assert _value(text, seconds, generator="gen-1", state="waiting") == 0.5


def test_the_steps_policy_statistics_and_lengths_become_gauges() -> None:
    live = RLMetrics("r", "europe-west4", 0, max_policy_age=1)
    policy = PolicyStats(
        clip_fraction=0.25, dual_clip_fraction=0.0, ratio_mean=1.01, ratio_max=2.5, entropy=1.5, kl=0.02,
        kl_against="reference", kl_sampler=0.003, tokens=10, shares=2, expected=2,
    )  # fmt: skip
    lengths = Lengths(completions=4, tokens=10, mean=2.5, max=4, truncated=0.5)
    live.observe(dataclasses.replace(REPORT, policy=policy, lengths=lengths))
    text = render(live.registry)
    assert check(metrics.RL, text) == []
    got = {
        m: _value(text, m.name)
        for m in (RL.clip_fraction, RL.importance_ratio_mean, RL.importance_ratio_max, RL.entropy, RL.kl_sampler,
                  RL.kl_reference, RL.response_tokens_mean, RL.response_tokens_max, RL.truncated)
    }  # fmt: skip
    assert list(got.values()) == [0.25, 1.01, 2.5, 1.5, 0.003, 0.02, 2.5, 4, 0.5]


def test_an_unknown_generator_state_is_refused() -> None:
    live = RLMetrics("r", "europe-west4", 0, max_policy_age=1)
    with pytest.raises(ValueError, match="'idle'"):
        live.generator("idle", 1.0, "gen-1")


def test_served_beside_the_trainers_metrics_in_one_registry() -> None:
    """Given the group's registry, RL's families go out on the trainer's /metrics endpoint (the scraped port)."""
    trainer = RunMetrics("r", "europe-west4", 0, Goodput(clock=lambda: 0.0))
    live = RLMetrics("r", "europe-west4", 0, max_policy_age=1, into=trainer.registry)
    live.observe(REPORT)
    text = render(trainer.registry)
    assert check([*metrics.TRAINER, *metrics.RL], text) == []
    assert _value(text, RL.policy_version.name) == 5
    assert _value(text, TRAINER.goodput_seconds.name, category="productive") == 0.0


def test_the_readme_lists_exactly_the_catalog() -> None:
    assert table(metrics.RL) in (REPO / "platform/trainer/README.md").read_text()
