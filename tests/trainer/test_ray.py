"""The cluster path: Ray Train's TorchTrainer with torchft (TorchftConfig), on a local Ray instance."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from trainer.config import compose
from trainer.ray_train import launch

from tests.trainer.conftest import CONFIG, events, final


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    import ray

    os.environ.setdefault("RUST_LOG", "warn")
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def test_two_replica_groups_train_under_ray_train(local_ray: None, tmp_path: Path) -> None:
    cfg = compose(
        CONFIG,
        [
            "run.name=ray",
            "run.launcher=ray",
            f"run.report_dir={tmp_path / 'runs'}",
            f"checkpoint.dir={tmp_path / 'checkpoints'}",
            "run.steps=30",
            "run.log_every=10",
            "checkpoint.every=10",
        ],
    )
    assert launch(cfg) == 0
    reports = [final(tmp_path, "ray", group) for group in (0, 1)]
    assert [r["step"] for r in reports] == [30, 30]
    assert reports[0]["weights"] == reports[1]["weights"]  # the groups trained as one data-parallel model
    assert reports[0]["bytes_sent"] > 0
    # A group that joined late healed past the first steps and never checkpointed them itself;
    # between them, the groups hold every checkpoint, and each holds the last one.
    durable = {g: {p.name for p in (tmp_path / "checkpoints" / f"group-{g}").iterdir()} for g in (0, 1)}
    assert durable[0] | durable[1] == {"step-000000010", "step-000000020", "step-000000030"}
    assert all("step-000000030" in steps for steps in durable.values())
    assert json.loads((tmp_path / "runs" / "ray" / "goodput.json").read_text())["replica_group_reports"] == 2


def test_groups_of_two_workers_shard_and_train_under_ray_train(
    local_ray: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = compose(
        CONFIG,
        [
            "run.name=raygroups",
            "run.launcher=ray",
            f"run.report_dir={tmp_path / 'runs'}",
            f"checkpoint.dir={tmp_path / 'checkpoints'}",
            "ft.group_size=2",
            "run.steps=12",
            "run.log_every=6",
            "checkpoint.every=6",
        ],
    )
    assert launch(cfg) == 0
    console = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in console if line.startswith("step ")] == ["6/12", "12/12"]  # with the loss
    assert all(" loss " in line for line in console if line.startswith("step "))
    assert console[-1].startswith("run raygroups completed; goodput raygroups: ")
    reports = [final(tmp_path, "raygroups", group) for group in (0, 1)]
    assert [r["step"] for r in reports] == [12, 12]
    assert reports[0]["weights"] == reports[1]["weights"]
    # Four workers made two groups of two: each rank of each group wrote its own shard file.
    last = {g: tmp_path / "checkpoints" / f"group-{g}" / "step-000000012" for g in (0, 1)}
    shards = {g: sorted(p.name for p in path.glob("*.distcp")) for g, path in last.items() if path.exists()}
    assert shards
    assert all(len(files) == 2 for files in shards.values())


def test_under_ray_a_killed_rank_restarts_every_group_from_the_newest_durable_checkpoint(
    local_ray: None, tmp_path: Path
) -> None:
    """Ray Train 2.60 replaces its whole worker group when a worker dies (ray_groups.py): no live peer is
    left, so both groups resume from the newest durable checkpoint and finish as one model."""
    cfg = compose(
        CONFIG,
        [
            "run.name=raykill",
            "run.launcher=ray",
            f"run.report_dir={tmp_path / 'runs'}",
            f"checkpoint.dir={tmp_path / 'checkpoints'}",
            "ft.group_size=2",
            "run.steps=24",
            "run.log_every=4",
            "checkpoint.every=4",
        ],
    )
    out = tmp_path / "runs" / "raykill"
    killed: list[int] = []

    def read(path: Path) -> list[dict[str, Any]]:
        lines = path.read_text().splitlines() if path.exists() else []
        return [json.loads(line) for line in lines if line.endswith("}")]  # not a line being written

    def kill_rank_1_of_group_1() -> None:
        for _ in range(1200):  # give up after 10 minutes: the test then fails on `killed`
            started = [e for e in read(out / "ranks" / "events-1-1.jsonl") if e["event"] == "started"]
            if started and any(e["event"] == "checkpoint_durable" for e in read(out / "events-0.jsonl")):
                os.kill(started[0]["pid"], signal.SIGKILL)
                killed.append(started[0]["pid"])
                return
            time.sleep(0.5)

    killer = threading.Thread(target=kill_rank_1_of_group_1)
    killer.start()
    assert launch(cfg) == 0
    killer.join()
    assert killed
    reports = [final(tmp_path, "raykill", group) for group in (0, 1)]
    assert [r["step"] for r in reports] == [24, 24]
    assert reports[0]["weights"] == reports[1]["weights"]
    for group in (0, 1):
        log = events(tmp_path, "raykill", group)
        assert [e["event"] for e in log].count("started") == 2  # every group started again, not only group 1
        assert log[[e["event"] for e in log].index("started", 1)]["resumed"]  # ... from a durable checkpoint
