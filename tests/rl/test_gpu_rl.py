"""scripts/gpu_rl.py on CPU: --help, its argument parsing, and --dry-run (tiny model, TorchGenerator, gloo)
running the whole flow and printing one JSON line per measurement with the keys the GPU run prints."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from types import ModuleType

import pytest
import torch

from tests.conftest import REPO

SCRIPT = REPO / "scripts/gpu_rl.py"


@pytest.fixture(scope="module")
def gpu_rl() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_rl", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_help_runs_on_cpu() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "--dry-run" in result.stdout
    assert "--models" in result.stdout


def test_arguments(gpu_rl: ModuleType) -> None:
    args = gpu_rl.parse([])
    assert (args.models, args.only, args.step_model, args.tp) == (["1b", "8b"], ["generate", "sync", "step"], "1b", 1)
    args = gpu_rl.parse(["--models", "8b", "--only", "sync", "--tp", "2", "--checkpoint", "/ckpt"])
    assert (args.models, args.only, args.tp, args.checkpoint) == (["8b"], ["sync"], 2, "/ckpt")
    dry = gpu_rl.parse(["--dry-run"])
    assert (dry.models, dry.step_model) == (["tiny"], "tiny")
    with pytest.raises(SystemExit) as error:
        gpu_rl.parse(["--only", "generate,train"])
    assert error.value.code == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_without_cuda_it_refuses_unless_dry_run(gpu_rl: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_rl.main([]) == 2
    assert "--dry-run" in capsys.readouterr().err


def test_dry_run_prints_every_measurement_with_the_gpu_keys(
    gpu_rl: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gpu_rl.main(["--dry-run"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [next(iter(row)) for row in rows] == ["generate", "sync", "step"]
    for row in rows:
        ((kind, values),) = row.items()
        assert set(values) == gpu_rl.KEYS[kind]
    generate, sync, step = (next(iter(row.values())) for row in rows)
    assert generate["engine"] == "TorchGenerator"
    assert generate["tokens"] == 4 * 2 * 4  # prompts x samples x max_tokens: no stop token
    assert "dry run" in sync["transport"]
    assert sync["bytes"] > 0
    assert step["rows"] == 4 * 2
    assert step["seq_len"] == 8 + 4  # prompt + response tokens
