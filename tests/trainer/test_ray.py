"""The cluster path on a one-node local Ray: the supervisor's groups train as one model (launch/ray_supervisor.py).

Faults on a Ray cluster of several nodes: test_ray_groups_recovery.py.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from trainer.config import compose
from trainer.launch.ray_train import launch

from tests.conftest import REPO
from tests.trainer.conftest import CONFIG, final

pytestmark = pytest.mark.live  # a local Ray and the driver under it


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    import ray

    os.environ.setdefault("RUST_LOG", "warn")
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def test_two_replica_groups_train_under_ray(local_ray: None, tmp_path: Path) -> None:
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
            "ft.min_replicas=2",  # both groups in every quorum, so both end on the same last step (see below)
        ],
    )
    assert launch(cfg) == 0
    reports = [final(tmp_path, "ray", group) for group in (0, 1)]
    assert [r["step"] for r in reports] == [30, 30]
    assert reports[0]["weights"] == reports[1]["weights"]  # the groups trained as one data-parallel model
    assert reports[0]["bytes_sent"] > 0
    # Between them, the groups hold every checkpoint, and each holds the last one.
    durable = {g: {p.name for p in (tmp_path / "checkpoints" / f"group-{g}").iterdir()} for g in (0, 1)}
    assert durable[0] | durable[1] == {"step-000000010", "step-000000020", "step-000000030"}
    assert all("step-000000030" in steps for steps in durable.values())
    assert json.loads((tmp_path / "runs" / "ray" / "goodput.json").read_text())["replica_group_reports"] == 2


def test_groups_of_two_workers_shard_and_train_under_ray(
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
            # Both groups in every quorum: a group placed later never commits a step alone at the end, after the
            # other left (with 1, the two can end on different last steps: seen once on 2 loaded cores).
            "ft.min_replicas=2",
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


def test_grpo_under_ray_runs_generators_as_actors_beside_the_groups(local_ray: None, tmp_path: Path) -> None:
    """run.mode=rl on Ray: the controller in the driver, two generator actors, two replica groups (4 CPUs)."""
    cfg = compose(
        REPO / "platform/trainer/configs/grpo.yaml",
        [
            "run.name=grpo",
            "run.launcher=ray",
            f"run.report_dir={tmp_path / 'runs'}",
            f"checkpoint.dir={tmp_path / 'checkpoints'}",
            "run.steps=6",
            "rl.prompts_per_step=16",
            "rl.group_size=8",
        ],
    )
    assert launch(cfg) == 0
    records = [json.loads(line) for line in (tmp_path / "runs" / "grpo" / "rl.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["event"] == "step"] == list(range(1, 7))
    assert sum(r["event"] == "generator_started" for r in records) == 2
    assert all(r["age_violations"] == 0 for r in records if r["event"] == "step")
    summary = json.loads((tmp_path / "runs" / "grpo" / "goodput.json").read_text())
    assert summary["generators"]["seconds"]["generating"] > 0
    assert [final(tmp_path, "grpo", group)["step"] for group in (0, 1)] == [6, 6]


def test_a_generator_actor_without_its_engine_stops_the_run_with_its_line(local_ray: None, tmp_path: Path) -> None:
    """rl.engine=vllm under Ray: the driver's image need not have vLLM, the generators' must; an actor without it
    refuses to start (exit 2) and the run stops at once with its line, not a restart every few seconds (issue 41)."""
    cfg = compose(
        REPO / "platform/trainer/configs/grpo.yaml",
        [
            "run.name=novllm",
            "run.launcher=ray",
            "rl.engine=vllm",
            f"run.report_dir={tmp_path / 'runs'}",
            f"checkpoint.dir={tmp_path / 'checkpoints'}",
            "run.steps=6",
        ],
    )
    assert launch(cfg) == 2
    records = [json.loads(line) for line in (tmp_path / "runs" / "novllm" / "rl.jsonl").read_text().splitlines()]
    assert sum(r["event"] == "generator_started" for r in records) == 2  # neither started again
    outcome = json.loads((tmp_path / "runs" / "novllm" / "goodput.json").read_text())["outcome"]
    assert outcome.startswith("stopped: generator-"), outcome
    assert ".0 refused to start (exit 2): rl.engine: vllm is not installed for " in outcome


def test_a_run_a_local_ray_cannot_hold_is_one_line() -> None:
    from trainer.launch.ray_train import capacity_problem

    cfg = compose(CONFIG, ["run.name=x", "run.launcher=ray", "ft.group_size=2"])
    assert capacity_problem(cfg, {"CPU": 2.0}) == (
        "run.launcher=ray: 2 replica group(s) of ft.group_size=2 need 4 CPUs (one per rank); the local Ray has 2; "
        "lower ft.replica_groups or ft.group_size, or run on a cluster (RAY_ADDRESS)"
    )
    assert capacity_problem(cfg, {"CPU": 4.0}) is None
    gpus = compose(CONFIG, ["run.name=x", "ft.device=cuda", "ft.group_size=8"])
    assert "need 16 GPUs (one per rank); the local Ray has 8" in (capacity_problem(gpus, {"CPU": 64, "GPU": 8}) or "")
