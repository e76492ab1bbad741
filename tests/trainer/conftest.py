"""Shared helpers: run the real driver (`train.py`) as a user would, with overrides."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from trainer.observe.runs import final_event, read_events

from tests.conftest import REPO, RUNNING_TIERS
from tests.waiting import until

TRAIN = REPO / "platform/trainer/train.py"
CONFIG = REPO / "platform/trainer/configs/config.yaml"


def overrides(tmp_path: Path, name: str, *extra: str) -> list[str]:
    return [
        f"run.name={name}",
        f"run.report_dir={tmp_path / 'runs'}",
        f"checkpoint.dir={tmp_path / 'checkpoints' / name}",
        "run.log_every=10",
        "ft.timeout_s=10",
        "ft.heartbeat_timeout_ms=2000",
        *extra,
    ]


def start(tmp_path: Path, name: str, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """The driver as a user runs it; ``env`` adds to this process's environment (gkr's variables)."""
    assert "live" in RUNNING_TIERS, "this test starts the driver: mark it pytest.mark.live (make unit runs no live run)"
    command = [sys.executable, str(TRAIN), str(CONFIG), *overrides(tmp_path, name, *extra)]
    environ = None if env is None else os.environ | env
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environ)


def run(tmp_path: Path, name: str, *extra: str, timeout: float = 300, env: dict[str, str] | None = None) -> str:
    proc = start(tmp_path, name, *extra, env=env)
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-3000:]
    return out


def events(tmp_path: Path, name: str, group: int) -> list[dict[str, Any]]:
    return read_events(tmp_path / "runs" / name, group)


def final(tmp_path: Path, name: str, group: int) -> dict[str, Any]:
    found = final_event(tmp_path / "runs" / name, group)
    assert found is not None, f"group {group} of {name} never finished"
    return found


def assert_same(actual: Any, expected: Any, where: str = "state") -> None:
    """Equal, recursively: tensors bit for bit and of one dtype, containers of one type, ``where`` names the path."""
    import numpy as np
    import torch

    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), where
        assert actual.dtype == expected.dtype, where
        assert torch.equal(actual, expected), where
    elif isinstance(expected, np.ndarray):
        assert np.array_equal(actual, expected), where
    elif isinstance(expected, dict):
        assert actual.keys() == expected.keys(), where
        for key in expected:
            assert_same(actual[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, list | tuple):
        assert type(actual) is type(expected), where
        assert len(actual) == len(expected), where
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same(a, e, f"{where}[{i}]")
    else:
        assert actual == expected, where


def wait_for(
    proc: subprocess.Popen[str], tmp_path: Path, name: str, event: str, step: int, within_s: float, group: int = 1
) -> None:
    """Until `group` of run `name` has logged `event` at `step` or later: the moment the fault tests kill it."""
    until(
        lambda: any(e["event"] == event and e["step"] >= step for e in events(tmp_path, name, group)),
        within_s,
        f"{name} reached step {step}",
        proc,
    )


def kill_and_finish(proc: subprocess.Popen[str], tmp_path: Path, name: str, group: int, timeout: float) -> float:
    """SIGKILL the process of `group` (rank 1 of it when the group has several ranks: the launcher takes the
    group down with it) and let the run finish; returns when it was killed. The run must end with 0."""
    out_dir = tmp_path / "runs" / name
    ranks = json.loads((out_dir / "ranks.json").read_text())[str(group)]
    os.kill(ranks[1] if len(ranks) > 1 else ranks[0], signal.SIGKILL)
    killed_at = time.time()
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-3000:]
    return killed_at
