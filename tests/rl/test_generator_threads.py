"""The local launcher's generators get their share of torch's threads (issue 41: with torch's default of every
core, a generator beside the ranks spun on 2 busy cores, its leases 15-30x slower than with one thread)."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainer.rl.launch import Processes


class Recorded:
    def __init__(self, module: str, args: list[str], environ: dict[str, str], log: Path) -> None:
        self.module, self.args, self.env, self.log, self.pid = module, args, environ, log, 4242


def test_a_generator_process_is_started_with_its_thread_share(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[Recorded] = []

    def start(module: str, args: list[str], environ: dict[str, str], log: Path) -> Recorded:
        started.append(Recorded(module, args, dict(environ), log))
        return started[-1]

    monkeypatch.setattr("trainer.launch.forked.start", start)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert Processes(tmp_path, tmp_path / "config.json", threads=3).spawn(0, 0) == 4242
    assert started[0].env["OMP_NUM_THREADS"] == "3"
    assert (started[0].module, started[0].args) == (
        "trainer.rl.generator_main",
        [str(tmp_path / "config.json"), "0", "0"],
    )
    assert started[0].log == tmp_path / "generator-0.log"
    monkeypatch.setenv("OMP_NUM_THREADS", "5")  # the operator's own setting wins, as for the ranks
    Processes(tmp_path, tmp_path / "config.json", threads=3).spawn(1, 0)
    assert started[1].env["OMP_NUM_THREADS"] == "5"
