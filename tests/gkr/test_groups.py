"""Replica groups: pods x gpus_per_pod mapped onto the trainer's groups, and the machine's peak for MFU."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import Result

from contract import names
from gkr import groups
from gkr.flags import as_flags
from gkr.spec import JobSpec
from gkr.submit import prepare
from tests.gkr.conftest import EXAMPLES, shipped

SHIPPED = shipped()
GROUP_ENV = (names.REPLICA_GROUPS_ENV, names.GROUP_SIZE_ENV)


def render(example: str | None, **given: Any) -> list[dict[str, Any]]:
    file = str(EXAMPLES / f"{example}.yaml") if example else None
    return prepare(file, as_flags(given), SHIPPED, None)[1]  # schema-checked there


def containers(value: Any) -> list[dict[str, Any]]:
    """Every main container below `value`, head and workers (init containers are preflight's)."""
    if isinstance(value, dict):
        own = value.get("containers")
        found = list(own) if isinstance(own, list) else []
        return found + [c for k, v in value.items() if k != "containers" for c in containers(v)]
    if isinstance(value, list):
        return [c for item in value for c in containers(item)]
    return []


def env_of(objects: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [{e["name"]: e.get("value") for e in c["env"]} for c in containers(objects)]


def spec(pods: int, gpus_per_pod: int = 8, **shape: int) -> JobSpec:
    return JobSpec(name="exp", team="research", pods=pods, gpus_per_pod=gpus_per_pod, **shape)  # type: ignore[arg-type]


def test_group_sizes_are_parts_of_a_pod_or_whole_pods() -> None:
    assert groups.sizes(8, 8) == [1, 2, 4, 8, 16, 32, 64]
    assert groups.sizes(6, 8) == [1, 2, 4, 8, 16, 24, 48]  # 12 divides 48 but splits pods
    assert groups.sizes(1, 4) == [1, 2, 4]
    assert groups.shape(spec(8)) is None  # unset: the trainer's config decides
    assert groups.shape(spec(8, replica_groups=4)) == (4, 16)
    assert groups.shape(spec(8, group_size=4)) == (16, 4)


@pytest.mark.parametrize(
    ("pods", "shape", "expected"),
    [
        (8, {"replica_groups": 4}, (4, 16)),
        (8, {"group_size": 64}, (1, 64)),
        (8, {"group_size": 2}, (32, 2)),
        (6, {"replica_groups": 3}, (3, 16)),
        (6, {"group_size": 24, "replica_groups": 2}, (2, 24)),
    ],
)
def test_shapes_that_divide_render_the_env_on_every_pod(pods: int, shape: dict[str, int], expected: Any) -> None:
    for example in ("pretrain-128-nodes", "persistent-raycluster", None):  # rayjob, raycluster, job
        extra = {} if example else {"name": "exp", "team": "research", "kind": "job", "command": ["python", "t.py"]}
        envs = env_of(render(example, pods=pods, gpus_per_pod=8, **shape, **extra))
        assert len(envs) == (1 if example is None else 2)  # a Ray head and its workers, or the Job's pods
        for env in envs:
            assert (env[names.REPLICA_GROUPS_ENV], env[names.GROUP_SIZE_ENV]) == tuple(map(str, expected))
            assert env[names.PEAK_TFLOPS_ENV] == "989"  # the H200's dense bf16 peak, from the catalog


def test_without_a_shape_the_pods_get_only_the_peak() -> None:
    for env in env_of(render("flex-start-finetune")):
        assert env[names.PEAK_TFLOPS_ENV] == "989"
        assert not set(GROUP_ENV) & set(env)


def test_cpu_jobs_get_no_peak_and_no_groups() -> None:
    for env in env_of(render("cpu-data-job")):
        assert not {names.PEAK_TFLOPS_ENV, *GROUP_ENV} & set(env)


REFUSED = [
    (
        ["--pods", "8", "--group-size", "12"],
        "flag --group-size: group_size 12 does not divide the 64 GPUs of 8 pods x 8; use 1, 2, 4, 8, 16, 32 or 64",
    ),
    (
        ["--pods", "8", "--replica-groups", "5"],
        "flag --replica-groups: 5 replica groups do not divide the 64 GPUs of 8 pods x 8; use 1, 2, 4, 8, 16, 32 or 64",
    ),
    (
        ["--pods", "6", "--group-size", "12"],
        "flag --group-size: group_size 12 would take part of two pods of 8 GPUs; a group must fit in one pod or be "
        "whole pods, since FSDP inside a group wants its ranks on one node's NVLink or whole nodes over RDMA; "
        "use 1, 2, 4, 8, 16, 24 or 48",
    ),
    (
        ["--pods", "6", "--replica-groups", "4"],
        "flag --replica-groups: 4 replica groups of 12 GPUs: a group of 12 would take part of two pods of 8 GPUs; "
        "a group must fit in one pod or be whole pods, since FSDP inside a group wants its ranks on one node's "
        "NVLink or whole nodes over RDMA; use 1, 2, 3, 6, 12, 24 or 48",
    ),
    (
        ["--pods", "8", "--replica-groups", "4", "--group-size", "8"],
        "flag --group-size: replica_groups 4 x group_size 8 = 32, not the 64 GPUs of 8 pods x 8; set only one of them",
    ),
    (
        ["--pods", "8", "--replica-groups", "0"],
        "flag --replica-groups: must be at least 1 (got 0); set replica_groups in the job file or with --replica-groups",
    ),
    (
        ["--pods", "2", "--gpus-per-pod", "0", "--group-size", "2"],
        "flag --group-size: replica groups are made of GPUs (one rank each) and this job has gpus_per_pod 0; "
        "drop group_size or ask for GPUs",
    ),
]


@pytest.mark.parametrize(("args", "line"), REFUSED)
def test_shapes_that_do_not_divide_are_one_line_and_nothing_is_applied(
    gkr: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], line: str
) -> None:
    # No --dry-run and no kubeconfig: the line is the shape's, so gkr stopped before any cluster call.
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    result = gkr("submit", "--team", "research", "--name", "exp", *args, "--", "python", "train.py")
    assert (result.exit_code, result.stderr) == (2, f"error: {line}\n")
    assert result.stdout == ""


def test_a_job_file_names_its_line(gkr: Callable[..., Result], tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: exp\nteam: research\npods: 8\nreplica_groups: 3\ncommand: python train.py\n")
    result = gkr("submit", "-f", str(job), "--dry-run")
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {job}:4: replica_groups: 3 replica groups do not divide the 64 GPUs of 8 pods x 8; "
        "use 1, 2, 4, 8, 16, 32 or 64\n"
    )


@pytest.mark.parametrize("value", ["true", "'4'", "2.5", "[4]", "-1", "100000000000000000000000000000000"])
def test_hostile_values_are_one_line(gkr: Callable[..., Result], tmp_path: Path, value: str) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(f"name: exp\nteam: research\npods: 8\ngroup_size: {value}\ncommand: python train.py\n")
    result = gkr("submit", "-f", str(job), "--dry-run")
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"error: {job}:4: group_size: ")


def test_flags_and_file_agree(tmp_path: Path) -> None:
    base = "name: exp\nteam: research\npods: 8\ncommand: python train.py\n"
    by_flag = prepare(None, as_flags({**yaml.safe_load(base), "group_size": 16}), SHIPPED, None)[1]
    for line in ("group_size: 16", "replica_groups: 4", "replica_groups: 4\ngroup_size: 16"):
        job = tmp_path / "job.yaml"
        job.write_text(f"{base}{line}\n")
        assert prepare(str(job), {}, SHIPPED, None)[1] == by_flag, line
    job.write_text(f"{base}group_size: 2\n")  # a flag overrides the file's value
    assert prepare(str(job), as_flags({"group_size": 16}), SHIPPED, None)[1] == by_flag


def test_the_platform_owns_the_variables(gkr: Callable[..., Result]) -> None:
    result = gkr(
        "submit", "--team", "research", "--name", "exp", "--group-size", "8", "--env", "MERIDIAN_GROUP_SIZE=2",
        "--dry-run", "--", "python", "train.py",
    )  # fmt: skip
    assert (result.exit_code, result.stderr) == (
        2,
        "error: flag --env: MERIDIAN_GROUP_SIZE is set by the platform on this job's pods; rename your variable\n",
    )


def test_the_summary_shows_the_shape(gkr: Callable[..., Result]) -> None:
    def second_line(*args: str) -> str:
        result = gkr("submit", "--team", "research", "--name", "exp", *args, "--dry-run", "--", "python", "t.py")
        assert result.exit_code == 0, result.stderr
        return str(result.stderr.splitlines()[1].split(";")[0])

    assert second_line("--pods", "8", "--replica-groups", "4") == (
        "8 pods x 8 H200 = 64 GPUs in 4 replica groups x 16 GPUs (2 pods each)"
    )
    assert (
        second_line("--pods", "2", "--group-size", "4")
        == "2 pods x 8 H200 = 16 GPUs in 4 replica groups x 4 GPUs (2 per pod)"
    )
    assert (
        second_line("--pods", "2", "--group-size", "8")
        == "2 pods x 8 H200 = 16 GPUs in 2 replica groups x 8 GPUs (one pod each)"
    )
    assert second_line("--pods", "1").startswith("1 pod x 8 H200 = 8 GPUs")  # "1 pods" before issue 31
    assert (
        second_line("--pods", "2", "--replica-groups", "1")
        == "2 pods x 8 H200 = 16 GPUs in 1 replica group x 16 GPUs (2 pods each)"
    )
    assert second_line("--pods", "2") == "2 pods x 8 H200 = 16 GPUs"


def test_a_flag_replaces_the_files_shape_whole(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: exp\nteam: research\npods: 8\nreplica_groups: 4\ncommand: python train.py\n")
    objects = prepare(str(job), as_flags({"group_size": 8}), SHIPPED, None)[1]
    for env in env_of(objects):  # --group-size alone is the whole new shape, not half of one with the file's
        assert (env[names.REPLICA_GROUPS_ENV], env[names.GROUP_SIZE_ENV]) == ("8", "8")
