"""The local launcher's generators get their share of torch's threads (issue 41: with torch's default of every
core, a generator beside the ranks spun on 2 busy cores, its leases 15-30x slower than with one thread)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from trainer.rl.launch import Processes


class Recorded:
    def __init__(self, command: list[str], **kwargs: Any) -> None:
        self.command, self.env, self.pid = command, kwargs["env"], 4242


def test_a_generator_process_is_started_with_its_thread_share(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[Recorded] = []

    def popen(command: list[str], **kwargs: Any) -> Recorded:
        started.append(Recorded(command, **kwargs))
        return started[-1]

    monkeypatch.setattr("trainer.rl.launch.subprocess.Popen", popen)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert Processes(tmp_path, tmp_path / "config.json", threads=3).spawn(0, 0) == 4242
    assert started[0].env["OMP_NUM_THREADS"] == "3"
    assert started[0].command[-3:] == [str(tmp_path / "config.json"), "0", "0"]
    monkeypatch.setenv("OMP_NUM_THREADS", "5")  # the operator's own setting wins, as for the ranks
    Processes(tmp_path, tmp_path / "config.json", threads=3).spawn(1, 0)
    assert started[1].env["OMP_NUM_THREADS"] == "5"
