"""GRPO from a Hugging Face checkpoint: loaded into the trainer's groups as saved, refused at start when it does not fit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from trainer.config import compose
from trainer.ft.manager import NoFaultTolerance
from trainer.model.transformer import LanguageModel
from trainer.rl.hf import save_hf
from trainer.rl.policy import PolicyTrainer

from tests.conftest import REPO
from tests.trainer.conftest import TRAIN

GRPO = REPO / "platform/trainer/configs/grpo.yaml"


def checkpoint(folder: Path, **model: object) -> dict[str, torch.Tensor]:
    cfg = compose(GRPO, ["run.name=x", *(f"model.{k}={v}" for k, v in model.items())]).model
    torch.manual_seed(123)  # not the run's seed: weights the run would not make itself
    state = LanguageModel(cfg).state_dict()
    save_hf(state, cfg, folder)
    return state


def test_the_trainer_starts_from_the_checkpoints_weights(tmp_path: Path) -> None:
    saved = checkpoint(tmp_path / "hf")
    cfg = compose(
        GRPO, ["run.name=x", f"rl.hf_checkpoint={tmp_path / 'hf'}", "ft.enabled=false", "ft.replica_groups=1"]
    )
    trainer = PolicyTrainer(cfg, 0, NoFaultTolerance())
    loaded = trainer.model.state_dict()
    assert loaded.keys() == saved.keys()
    assert all(torch.equal(loaded[name], saved[name]) for name in saved)


@pytest.mark.scenario
def test_a_checkpoint_of_another_model_is_refused_at_start_with_the_overrides(tmp_path: Path) -> None:
    checkpoint(tmp_path / "hf", d_model=128, layers=3)
    command = [sys.executable, str(TRAIN), str(GRPO), "run.name=x", f"rl.hf_checkpoint={tmp_path / 'hf'}",
               f"checkpoint.dir={tmp_path / 'ck'}", f"run.report_dir={tmp_path / 'runs'}"]  # fmt: skip
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "is a different model than the run's; set model.d_model=128 model.layers=3" in lines[0]
    assert not (tmp_path / "runs").exists()  # refused before anything was written
