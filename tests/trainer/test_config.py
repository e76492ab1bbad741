"""Configuration: Hydra composition, typed schema, one clear line for every bad value."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from trainer.config import ConfigError, compose
from trainer.observe.goodput import Goodput, combine

from contract.names import GENERATORS_ENV
from tests.trainer.conftest import CONFIG, TRAIN


def test_defaults_overrides_and_new_keys() -> None:
    cwd = os.getcwd()
    cfg = compose(CONFIG, ["run.name=example", "optim=streaming_diloco", "model.layers=4", "+extra.note=hi"])
    assert os.getcwd() == cwd  # Hydra does not move the working directory
    assert (cfg.run.name, cfg.model.layers) == ("example", 4)
    assert (cfg.optim.algorithm, cfg.optim.fragments, cfg.optim.fragment_sync_delay) == ("diloco", 2, 1)
    assert (cfg.optim.outer_lr, cfg.optim.outer_momentum, cfg.optim.nesterov, cfg.optim.sync_every) == (
        0.7, 0.9, True, 500,
    )  # fmt: skip  # the DiLoCo paper's defaults
    assert cfg.extra == {"extra": {"note": "hi"}}
    assert cfg.checkpoint.dir == "/tmp/meridian-checkpoints/example"  # interpolation resolved
    assert cfg.ft.spare_groups == 0  # no spare capacity unless the job asks (gkr renders it)
    assert compose(CONFIG, ["run.name=x", "ft.spare_groups=1"]).ft.spare_groups == 1


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([], "run.name: missing; set run.name=<value>"),
        (["run.name=x", "optim.lr=fast"], "optim.lr: 'fast' is not a number"),
        (["run.name=x", "run.steps=0"], "run.steps: must be at least 1 (got 0)"),
        (["run.name=x", "run.stepz=5"], "Could not override 'run.stepz'; To append to your config use +run.stepz=5"),
        (["run.name=x", "+run.stepz=5"], "run.stepz: unknown field; did you mean steps?"),
        (["run.name=x", "optim=adam"], "Could not find 'optim/adam'; Available options in 'optim'; ddp; diloco"),
        (["run.name=x", "run.launcher=slurm"], "run.launcher: 'slurm' is not one of 'local', 'ray'"),
        (["run.name=x", "ft.min_replicas=3"], "ft.min_replicas: 3 > ft.replica_groups 2"),
        (["run.name=x", "ft.enabled=false"], "ft.replica_groups: 2 groups need fault tolerance to agree"),
        (["run.name=x", "ft.enabled=false", "ft.replica_groups=1", "optim=diloco"], "diloco syncs replica groups"),
        (["run.name=x", "model.heads=5"], "model.heads: 5 does not divide model.d_model 64"),
        (["run.name=x", "optim=diloco", "optim.sync_every=7", "optim.fragments=2"], "not a multiple of"),
        (["run.name=x", "ft.restart_failed=maybe"], "ft.restart_failed: 'maybe' is not true or false"),
        (["run.name=x", "optim.lr=="], "Error parsing override 'optim.lr=='"),
        (["run.name=../evals/run-1"], "run.name: '../evals/run-1' must be one path segment"),
        (["run.name=.."], "run.name: '..' must be one path segment"),
        (["run.name=x", "ft.spare_groups=-1"], "ft.spare_groups: must be at least 0 (got -1)"),
        (["run.name=x", "ft.spare_groups=3"], "ft.spare_groups: 3 is more than the run's 2 replica groups; use 0 to 2"),
        (["run.name=x", "ft.spare_groups=one"], "ft.spare_groups: 'one' is not an integer"),
    ],
)
def test_bad_values_are_one_clear_line(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as error:
        compose(CONFIG, overrides)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_the_generator_count_defaults_to_the_environment_and_the_command_line_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    grpo = CONFIG.with_name("grpo.yaml")
    assert compose(grpo, ["run.name=x"]).rl.generators == 2  # the config's own, with no job around it
    monkeypatch.setenv(GENERATORS_ENV, "8")  # gkr's count of the RL job's engines
    assert compose(grpo, ["run.name=x"]).rl.generators == 8
    assert compose(grpo, ["run.name=x", "rl.generators=3"]).rl.generators == 3
    monkeypatch.setenv(GENERATORS_ENV, "eight")
    with pytest.raises(ConfigError) as error:
        compose(grpo, ["run.name=x"])
    assert str(error.value) == f"${GENERATORS_ENV}: expected a whole number, got 'eight'; fix the job's environment"


def test_the_driver_exits_2_with_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(TRAIN), str(CONFIG), "run.name=x", "optim.lr=fast"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip() == "train.py: optim.lr: 'fast' is not a number; set optim.lr=<a number>"
    missing = subprocess.run(
        [sys.executable, str(TRAIN), str(tmp_path / "nope.yaml")], capture_output=True, text=True, check=False
    )
    assert missing.returncode == 2
    assert "no such config file" in missing.stderr
    assert not (tmp_path / "runs").exists()  # nothing written


def test_goodput_books_every_second_once() -> None:
    ticks = iter([0.0, 2.0])
    g = Goodput(clock=lambda: next(ticks))
    with g.timed("startup"):
        pass
    g.step(1.0, committed=True, replayed=False)
    g.step(1.0, committed=True, replayed=True)
    g.step(0.5, committed=False, replayed=False)
    g.add("checkpoint", 0.5)
    assert g.total == 5.0
    assert g.goodput == 0.2
    assert g.report()["steps"] == {"committed": 1, "replayed": 1, "failed": 1}
    both = combine([g.report(), g.report()])
    assert both["goodput"] == 0.2
    assert both["total_seconds"] == 10.0


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("optim.lr=nan", "optim.lr: nan is not a finite number"),
        ("optim.lr=inf", "optim.lr: inf is not a finite number"),
        ("optim.weight_decay=nan", "optim.weight_decay: nan is not a finite number"),
        ("optim.weight_decay=-0.1", "optim.weight_decay: must be at least 0"),
        ("optim.betas=[2,0.95]", "optim.betas[0]: must be less than 1 (got 2.0)"),
        ("optim.betas=[0.9,-0.5]", "optim.betas[1]: must be at least 0 (got -0.5)"),
        ("optim.grad_clip=-1", "optim.grad_clip: must be at least 0"),
        ("run.steps=5000000000", "run.steps: must be at most"),
        ("data.batch_size=4000000000", "data.batch_size: must be at most"),
        ("model.layers=100000", "model.layers: must be at most"),
        ("ft.replica_groups=1000000", "ft.replica_groups: must be at most"),
        ("ft.timeout_s=1e12", "ft.timeout_s: must be at most"),
        ("run.seed=-1", "run.seed: must be at least 0"),
    ],
)
def test_numbers_out_of_range_are_refused_at_start(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        compose(CONFIG, ["run.name=x", override])
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_every_numeric_setting_is_bounded_both_ways() -> None:
    """A number with no upper bound lets a typo of a few digits through (a billion steps, a batch that never fits)."""
    from dataclasses import is_dataclass

    from trainer.config import Config

    from contract import codec

    unbounded = []
    for section, kind in codec.declared(Config):
        if not is_dataclass(kind) or not isinstance(kind, type):
            continue
        for field, value_kind in codec.declared(kind):
            numbers = {int, float, tuple[float, float]}
            if value_kind in numbers:
                rule = codec.setting_of(field)
                if (rule.low is None and rule.above is None) or (rule.high is None and rule.below is None):
                    unbounded.append(f"{section.name}.{field.name}")
    assert unbounded == []


def test_help_lists_every_key_with_its_default() -> None:
    result = subprocess.run(
        [sys.executable, str(TRAIN), "--help"], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[0].startswith("usage: train.py CONFIG.yaml")
    assert any(line.split()[:2] == ["run.steps", "300"] for line in lines)
    assert any(line.split()[:2] == ["optim.lr", "0.003"] and "above 0" in line for line in lines)
    assert any(line.startswith("  optim.betas ") and "[0.9, 0.95]" in line and "below 1" in line for line in lines)
    assert any(line.split()[:1] == ["run.name"] and "required" in line for line in lines)
    assert any(line.split()[:1] == ["rl.group_size"] for line in lines)  # every section, the RL one too
    # Each rl.* key listed is one the RL run reads (tests/rl/test_settings.py); its steps and lr are run.*, optim.*.
    assert not any(line.split()[:1] in (["rl.steps"], ["rl.lr"], ["rl.staleness"]) for line in lines)
    assert "ft.group_size" in result.stdout
    assert "checkpoint.every" in result.stdout
