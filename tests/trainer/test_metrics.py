"""The trainer's live metrics from its events (pure: no run), the port fallback, the README's table."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

from trainer.observe.goodput import Goodput
from trainer.observe.metrics import RunMetrics, region_of

from contract import metrics
from contract.metrics import TRAINER
from telemetry.exposition import check, render, table
from tests.conftest import REPO

LABELS = {"run": "r", "region": "europe-west4", "group": "1"}


class Sink:
    def __init__(self) -> None:
        self.logged: list[tuple[dict[str, float], int]] = []
        self.finished = False

    def log(self, values: dict[str, float], step: int) -> None:
        self.logged.append((values, step))

    def finish(self) -> None:
        self.finished = True


def test_events_update_the_catalogs_families() -> None:
    goodput, sink = Goodput(clock=lambda: 0.0), Sink()
    live = RunMetrics("r", "europe-west4", 1, goodput, (sink,))
    goodput.add("startup", 4.0)
    live.record("started", {})
    goodput.step(2.0, committed=True, replayed=False)
    goodput.step(1.0, committed=False, replayed=False)
    goodput.add("recovery", 0.5)
    live.record("commit", {"step": 7, "participants": 2})
    live.record("healed", {"step": 7})
    live.record("checkpoint_staged", {"step": 7, "seconds": 0.2})
    live.record("checkpoint_durable", {"step": 7, "seconds": 12.0})
    live.record("step", {"step": 7, "loss": 2.5, "tokens_per_s": 1000.0, "mfu": 0.41})
    family = live.family
    assert family[TRAINER.step].get(**LABELS) == 7
    assert family[TRAINER.participants].get(**LABELS) == 2
    assert family[TRAINER.heals].get(**LABELS) == 1
    assert family[TRAINER.mfu_ratio].get(**LABELS) == 0.41
    seconds = family[TRAINER.goodput_seconds]
    assert seconds.get(**LABELS, category="startup") == 4.0
    assert seconds.get(**LABELS, category="productive") == 2.0
    assert seconds.get(**LABELS, category="failed") == 1.5  # failed steps and the recovery stall
    assert family[TRAINER.checkpoint_seconds].get(**LABELS, state="durable") == 1
    assert check(metrics.TRAINER, render(live.registry)) == []
    values, step = sink.logged[-1]
    assert step == 7
    assert values["loss"] == 2.5
    assert values["goodput_seconds/failed"] == 1.5
    assert values["heals"] == 1


def test_a_taken_port_falls_back_to_a_free_one_written_to_the_run_dir(tmp_path: Path) -> None:
    holder = socket.socket()
    holder.bind(("0.0.0.0", 0))
    holder.listen()
    taken = holder.getsockname()[1]
    live = RunMetrics("r", "local", 0, Goodput())
    try:
        live.serve(taken, tmp_path / "metrics-0.port")
        assert live.port != taken
        assert (tmp_path / "metrics-0.port").read_text() == f"{live.port}\n"
        with urllib.request.urlopen(f"http://127.0.0.1:{live.port}/metrics", timeout=10) as response:
            assert "meridian_trainer_goodput_seconds_total" in response.read().decode()
    finally:
        live.finish(tmp_path / "final.prom")
        holder.close()
    assert check(metrics.TRAINER, (tmp_path / "final.prom").read_text()) == []


def test_the_region_label_comes_from_the_job_else_local() -> None:
    class Cfg:
        class ft:
            pass

    assert region_of(Cfg, {"MERIDIAN_REGION": "us-east5"}) == "us-east5"
    assert region_of(Cfg, {}) == "local"


def test_the_readme_lists_exactly_the_catalog() -> None:
    assert table(metrics.TRAINER) in (REPO / "platform/trainer/README.md").read_text()
