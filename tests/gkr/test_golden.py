"""Golden dry-runs of the example jobs: exactly what would be applied (GKR_UPDATE_GOLDEN=1 rewrites them)."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
import yaml
from click.testing import Result

from tests.gkr.conftest import EXAMPLES, GOLDEN

CASES = sorted(p.stem for p in EXAMPLES.glob("*.yaml"))


def test_every_example_has_a_golden_file() -> None:
    assert CASES == [
        "cpu-data-job",
        "cross-region",
        "flex-start-finetune",
        "grpo-8b",
        "grpo-tiny-cpu",
        "persistent-raycluster",
        "pretrain-128-nodes",
        "pretrain-spares",
    ]
    assert sorted(p.stem for p in GOLDEN.glob("*.yaml")) == CASES


@pytest.mark.parametrize("case", CASES)
def test_dry_run_matches_golden(gkr: Callable[..., Result], case: str) -> None:
    result = gkr("submit", "-f", str(EXAMPLES / f"{case}.yaml"), "--dry-run", "-o", "yaml")
    assert result.exit_code == 0, result.stderr
    golden = GOLDEN / f"{case}.yaml"
    if os.environ.get("GKR_UPDATE_GOLDEN"):
        golden.write_text(result.stdout)
    assert result.stdout == golden.read_text()
    assert all(doc["metadata"]["namespace"].startswith("team-") for doc in yaml.safe_load_all(result.stdout))


def test_summary_states_the_arithmetic(gkr: Callable[..., Result]) -> None:
    result = gkr("submit", "-f", str(EXAMPLES / "pretrain-128-nodes.yaml"), "--dry-run")
    assert result.stderr.splitlines() == [
        "rayjob llama-70b-pretrain -> gke_meridian-train-prod_us-central1_meridian-us-central1 "
        "(namespace team-pretraining, queue pretraining, priority high, pool h200-a)",
        "128 pods x 8 H200 = 1,024 GPUs; 128 x 201 CPU = 25,728 CPU; 128 x 2.59 TiB = 332 TiB requested; Ray head 8 CPU, 32 GiB",
    ]


def test_flags_override_the_file(gkr: Callable[..., Result]) -> None:
    result = gkr(
        "submit",
        "-f",
        str(EXAMPLES / "flex-start-finetune.yaml"),
        "--pods",
        "2",
        "--gpus-per-pod",
        "4",
        "--cpus-per-pod",
        "80",
        "--memory-per-pod-gib",
        "512",
        "--dry-run",
    )
    assert result.exit_code == 0, result.stderr
    assert "2 pods x 4 H200 = 8 GPUs; 2 x 80 CPU = 160 CPU; 2 x 512 GiB = 1 TiB requested" in result.stderr
    (job,) = yaml.safe_load_all(result.stdout)
    assert job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] == 2


def test_json_output(gkr: Callable[..., Result]) -> None:
    import json

    result = gkr("submit", "-f", str(EXAMPLES / "cpu-data-job.yaml"), "--dry-run", "-o", "json")
    service, job = json.loads(result.stdout)
    assert (service["kind"], job["kind"]) == ("Service", "Job")


def test_preflight_only_job_on_a_chosen_shape(gkr: Callable[..., Result]) -> None:
    result = gkr("preflight", "--team", "research", "--region", "us-east4", "--pods", "2", "--dry-run")
    assert result.exit_code == 0, result.stderr
    service, job = yaml.safe_load_all(result.stdout)
    assert (service["kind"], job["kind"]) == ("Service", "Job")
    assert job["metadata"]["name"].startswith("preflight-")
    script = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert "preflight run --check allreduce --min-busbw-gbps=256" in script
    assert script.endswith("exec preflight run --check compute")
    assert "2 pods x 8 H200 = 16 GPUs" in result.stderr
