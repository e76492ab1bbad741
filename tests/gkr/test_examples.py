"""Every example runs what the training image has: train.py and a config under /opt/trainer/configs."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from tests.gkr.conftest import EXAMPLES

TRAINER = Path(__file__).resolve().parents[2] / "platform" / "trainer"  # the image's /opt/trainer (Dockerfile COPY)
RUNS = sorted(p.name for p in EXAMPLES.glob("*.yaml") if "command" in yaml.safe_load(p.read_text()))


def train_args(command: str | list[str]) -> list[str]:
    words = shlex.split(command) if isinstance(command, str) else command
    assert "train.py" in words, f"{command!r}: the image's entrypoint is train.py"
    return words[words.index("train.py") + 1 :]


@pytest.mark.parametrize("example", RUNS)
def test_example_config_exists_and_composes(example: str) -> None:
    from trainer.config import compose

    config, *overrides = train_args(yaml.safe_load((EXAMPLES / example).read_text())["command"])
    assert (TRAINER / config).is_file(), f"{example}: {config} is not in platform/trainer/configs"
    # The pod's shell expands $VARS; any value will do to check the keys.
    compose(TRAINER / config, [o.replace("$JOB_COMPLETION_INDEX", "0") for o in overrides])


def test_every_example_with_a_command_is_checked() -> None:
    assert RUNS == [
        "cpu-data-job.yaml",
        "cross-region.yaml",
        "flex-start-finetune.yaml",
        "grpo-8b.yaml",
        "grpo-tiny-cpu.yaml",
        "pretrain-128-nodes.yaml",
        "pretrain-spares.yaml",
    ]
