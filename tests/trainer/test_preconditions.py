"""Start checks: what must hold before the first step fails at once, with one line and exit 2."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from trainer import preconditions
from trainer.config import Config, compose
from trainer.rl.prompts import Problem

from contract import names
from tests.rl.bpe import train_bpe
from tests.trainer.conftest import CONFIG, TRAIN

GRPO = CONFIG.parent / "grpo.yaml"
TORCH_TP = (
    "rl.engine: torch runs each generator on one GPU, but $MERIDIAN_TP=2 makes each reserve 2; "
    "set roles.generators.tensor_parallel: 1 in the gkr job, or rl.engine=vllm"
)


def cfg(tmp_path: Path, *extra: str) -> Config:
    return compose(CONFIG, ["run.name=x", f"checkpoint.dir={tmp_path / 'ck'}", *extra])


def test_a_good_configuration_passes_and_the_probe_leaves_nothing(tmp_path: Path) -> None:
    assert preconditions.first_problem(cfg(tmp_path)) is None
    assert list((tmp_path / "ck").iterdir()) == []


def unwritable(tmp_path: Path, kind: str) -> str:
    if kind == "under a file":
        (tmp_path / "file").write_text("")
        return str(tmp_path / "file" / "ck")
    if os.geteuid() != 0:
        (tmp_path / "ro").mkdir(mode=0o555)
        return str(tmp_path / "ro" / "ck")
    return "/sys/meridian-ck"  # root writes through permissions; sysfs refuses even root


@pytest.mark.parametrize("kind", ["under a file", "read-only"])
def test_an_unwritable_checkpoint_dir(tmp_path: Path, kind: str) -> None:
    path = unwritable(tmp_path, kind)
    problem = preconditions.checkpoint_dir_writable(cfg(tmp_path, f"checkpoint.dir={path}"))
    assert problem is not None
    assert problem.startswith(f"checkpoint.dir: {path} is not writable (")
    assert problem.endswith("set checkpoint.dir=<a writable path>")
    assert "\n" not in problem


def test_a_device_that_is_not_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    problem = preconditions.device_exists(cfg(tmp_path, "ft.device=cuda"))
    assert (
        problem
        == "ft.device: cuda requested but no CUDA device is visible here; set ft.device=cpu or run on a GPU node"
    )
    assert (
        preconditions.device_exists(cfg(tmp_path, "ft.device=cuda", "run.launcher=ray")) is None
    )  # the driver may have none
    assert preconditions.device_exists(cfg(tmp_path)) is None


def test_a_data_path_that_is_not_there_or_too_short(tmp_path: Path) -> None:
    missing = preconditions.data_path_exists(cfg(tmp_path, "data=text", f"data.path={tmp_path / 'nope.txt'}"))
    assert (
        missing
        == f"data.path: {tmp_path / 'nope.txt'}: no such file; set data.path=<a text file> (empty: the packaged corpus)"
    )
    (tmp_path / "short.txt").write_text("abc")
    short = preconditions.data_path_exists(cfg(tmp_path, "data=text", f"data.path={tmp_path / 'short.txt'}"))
    assert short is not None
    assert "has 3 bytes, fewer than one sequence" in short
    assert preconditions.data_path_exists(cfg(tmp_path, "data=text")) is None  # the packaged corpus


def test_wandb_must_be_installed_when_asked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert preconditions.wandb_installed(cfg(tmp_path, "logging.wandb=true")) is None  # the dev install has it
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert preconditions.wandb_installed(cfg(tmp_path)) is None  # off: never looked for
    problem = preconditions.wandb_installed(cfg(tmp_path, "logging.wandb=true"))
    assert problem is not None
    assert problem.startswith("logging.wandb: wandb is not installed;")


def test_the_shape_must_divide_and_other_parts_add_their_own_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Ft:
        group_size = 3

    config = cfg(tmp_path)
    shaped = type("C", (), {"ft": Ft(), "data": config.data})()  # ft.group_size comes with sharded groups
    problem = preconditions.shape_divides(shaped)
    assert (
        problem
        == "data.batch_size: 16 does not split over ft.group_size 3 ranks; set data.batch_size to a multiple of it"
    )
    monkeypatch.setattr(preconditions, "CHECKS", [*preconditions.CHECKS, lambda c: "ft.group_size: example"])
    assert preconditions.first_problem(config) == "ft.group_size: example"


def test_tensor_parallel_is_refused_for_the_torch_engine(tmp_path: Path) -> None:
    """A torch engine runs on one GPU: gkr's MERIDIAN_TP above 1 would have each generator reserve GPUs it never uses."""
    rl = compose(str(GRPO), ["run.name=x", f"checkpoint.dir={tmp_path / 'ck'}"])
    assert rl.rl.engine == names.TORCH_ENGINE
    check = preconditions.engine_uses_its_gpus
    assert check(rl, {names.TENSOR_PARALLEL_ENV: "2"}) == TORCH_TP
    assert check(rl, {names.TENSOR_PARALLEL_ENV: "1"}) is None
    assert check(rl, {}) is None  # the local launcher sets none
    vllm = compose(str(GRPO), ["run.name=x", f"checkpoint.dir={tmp_path / 'ck'}", f"rl.engine={names.VLLM_ENGINE}"])
    assert check(vllm, {names.TENSOR_PARALLEL_ENV: "2"}) is None  # vLLM splits the engine over them
    assert check(cfg(tmp_path), {names.TENSOR_PARALLEL_ENV: "2"}) is None  # pretraining runs no generators
    bad = check(rl, {names.TENSOR_PARALLEL_ENV: "two"})
    assert bad is not None
    assert bad.startswith("$MERIDIAN_TP: 'two' is not a GPU count 1..64")


@pytest.mark.scenario
def test_the_driver_refuses_tensor_parallel_for_the_torch_engine_at_start(tmp_path: Path) -> None:
    command = [sys.executable, str(TRAIN), str(GRPO), "run.name=x", f"checkpoint.dir={tmp_path / 'ck'}"]
    environ = os.environ | {names.TENSOR_PARALLEL_ENV: "2"}
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120, env=environ)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"train.py: {TORCH_TP}\n"
    assert not (tmp_path / "ck").exists()  # refused before the checkpoint probe writes anything


def test_rl_allowed_must_be_expressible_in_the_runs_tokenizer(tmp_path: Path) -> None:
    """rl.allowed=digits in the tokenizer's own ids, refused at start when it has none or they do not fit the model."""
    check = preconditions.rl_tokens_expressible
    base = ["run.name=x", f"checkpoint.dir={tmp_path / 'ck'}"]
    assert check(compose(str(GRPO), base)) is None  # byte tokens: 48-57
    small = compose(str(GRPO), [*base, "model.vocab=40"])
    assert check(small) == (
        "rl.allowed: digits: token 57 is past the model's vocab 40; set model.vocab to the tokenizer's"
    )
    assert preconditions.first_problem(small) == check(small)
    letters = train_bpe([Problem(prompt="ab+cd=", answer="x")], tmp_path / "hf", vocab_size=12)
    from_letters = compose(str(GRPO), [*base, f"rl.hf_checkpoint={letters}"])
    assert check(from_letters) == "rl.allowed: digits: no token of the tokenizer is digits; set rl.allowed=''"
    assert check(compose(str(GRPO), [*base, f"rl.hf_checkpoint={letters}", "rl.allowed="])) is None


@pytest.mark.scenario
def test_the_driver_refuses_digits_the_tokenizer_cannot_express_at_start(tmp_path: Path) -> None:
    command = [
        sys.executable,
        str(TRAIN),
        str(GRPO),
        "run.name=x",
        f"checkpoint.dir={tmp_path / 'ck'}",
        "model.vocab=40",
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "train.py: rl.allowed: digits: token 57 is past the model's vocab 40; set model.vocab to the tokenizer's\n"
    )
