"""RL jobs (`roles`): one RayJob, a worker group per role, one pool, one Kueue Workload, both roles counted."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import Result

from contract import names
from gkr.flags import as_flags
from gkr.submit import prepare
from tests.conftest import REPO
from tests.gkr.conftest import EXAMPLES, shipped

SHIPPED = shipped()
GRPO_8B = yaml.safe_load((EXAMPLES / "grpo-8b.yaml").read_text())


def groups_of(example: str) -> list[dict[str, Any]]:
    (job,) = prepare(str(EXAMPLES / f"{example}.yaml"), as_flags({}), SHIPPED, None)[1]  # schema-checked there
    return list(job["spec"]["rayClusterSpec"]["workerGroupSpecs"])


def env(group: dict[str, Any]) -> dict[str, str]:
    (container,) = group["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", "") for e in container["env"]}


def test_one_worker_group_per_role_pinned_by_a_ray_resource() -> None:
    trainer, generators = groups_of("grpo-8b")
    assert (trainer["groupName"], generators["groupName"]) == ("trainer", "generators")
    for group, pods in ((trainer, 3), (generators, 1)):
        assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == pods
        (container,) = group["template"]["spec"]["containers"]
        assert container["resources"]["limits"][names.GPU_RESOURCE] == "8"
    assert trainer["rayStartParams"] == {"resources": '"{\\"meridian_trainer\\": 8}"'}
    assert generators["rayStartParams"] == {"resources": '"{\\"meridian_generator\\": 8}"'}


def test_each_role_its_environment() -> None:
    trainer, generators = map(env, groups_of("grpo-8b"))
    assert trainer[names.ROLE_ENV] == "trainer"
    assert generators[names.ROLE_ENV] == "generators"
    assert (trainer[names.REPLICA_GROUPS_ENV], trainer[names.GROUP_SIZE_ENV]) == ("3", "8")
    assert names.REPLICA_GROUPS_ENV not in generators
    assert names.GROUP_SIZE_ENV not in generators
    assert generators[names.TENSOR_PARALLEL_ENV] == "1"  # torch engines: one GPU each
    assert names.TENSOR_PARALLEL_ENV not in trainer
    assert names.PEAK_TFLOPS_ENV in trainer
    assert names.PEAK_TFLOPS_ENV in generators


def head_env(example: str) -> dict[str, str]:
    (job,) = prepare(str(EXAMPLES / f"{example}.yaml"), as_flags({}), SHIPPED, None)[1]
    (container,) = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", "") for e in container["env"]}


@pytest.mark.parametrize(("example", "engines", "tp"), [("grpo-8b", "8", "1"), ("grpo-tiny-cpu", "1", "1")])
def test_the_driver_learns_the_engines_and_their_size(example: str, engines: str, tp: str) -> None:
    """rl.generators where the group shape goes (head and trainer); the head's driver sizes each actor's ask."""
    head = head_env(example)
    trainer, generators = map(env, groups_of(example))
    assert (head[names.GENERATORS_ENV], head[names.TENSOR_PARALLEL_ENV]) == (engines, tp)
    assert trainer[names.GENERATORS_ENV] == engines
    assert names.GENERATORS_ENV not in generators


def test_both_roles_in_the_jobs_pool_and_topology_the_head_on_cpu() -> None:
    (job,) = prepare(str(EXAMPLES / "grpo-8b.yaml"), as_flags({}), SHIPPED, None)[1]
    cluster = job["spec"]["rayClusterSpec"]
    templates = [g["template"] for g in cluster["workerGroupSpecs"]]
    assert {t["spec"]["nodeSelector"][names.NODE_POOL_LABEL] for t in templates} == {"h200-a"}
    assert all("kueue.x-k8s.io/podset-required-topology" in t["metadata"]["annotations"] for t in templates)
    assert cluster["headGroupSpec"]["template"]["spec"]["nodeSelector"] == {names.NODE_POOL_LABEL: "cpu"}


def test_cpu_example_runs_both_roles_on_the_cpu_pool() -> None:
    groups = groups_of("grpo-tiny-cpu")
    assert [g["groupName"] for g in groups] == ["trainer", "generators"]
    for group in groups:
        spec = group["template"]["spec"]
        assert spec["nodeSelector"] == {names.NODE_POOL_LABEL: "cpu"}
        assert names.GPU_RESOURCE not in spec["containers"][0]["resources"]["requests"]
    assert groups[0]["rayStartParams"] == {"resources": '"{\\"meridian_trainer\\": 2}"'}


def test_kueue_admits_the_roles_as_one_workload_within_its_podset_limit(fleet: Any) -> None:
    """KubeRay's Kueue integration makes a PodSet of the head and of each worker group, in one Workload."""
    from fleet.gitops.validate import crd_folders, crd_roots, read_crd

    folder = crd_folders(fleet)["kueue.x-k8s.io"]
    found = [p for root in crd_roots(REPO) if (p := root / folder / "kueue.x-k8s.io_workloads.yaml").exists()]
    if not found:
        pytest.skip("the pinned Kueue CRDs are not here (../shared/crds or .cache/crds)")
    crd = read_crd(found[0])
    limits = {
        v["name"]: v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["podSets"]["maxItems"]
        for v in crd["spec"]["versions"]
    }
    podsets = 1 + len(groups_of("grpo-8b"))
    assert podsets == 3
    assert all(podsets <= limit for limit in limits.values()), limits


TORCH_TP = (
    "2 GPUs per engine, but the command does not select vLLM and the torch engine (the trainer's default) runs "
    "each generator on one GPU; set tensor_parallel: 1, or add rl.engine=vllm to the command"
)


def job(tmp_path: Path, **changes: Any) -> str:
    data = {**GRPO_8B, **changes}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def roles(trainer: dict[str, Any] | None = None, generators: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "trainer": {**GRPO_8B["roles"]["trainer"], **(trainer or {})},
        "generators": {**GRPO_8B["roles"]["generators"], **(generators or {})},
    }


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"pods": 4}, "pods: comes from roles.trainer in an RL job; drop it and set roles.trainer.pods"),
        ({"group_size": 8}, "group_size: comes from roles.trainer"),
        ({"replica_groups": 2}, "replica_groups: comes from roles.trainer"),
        ({"kind": "raycluster", "command": None}, "kind: roles make one RayJob, not a raycluster; use kind: rayjob"),
        ({"roles": roles(generators={"tensor_parallel": 3})}, "roles.generators.tensor_parallel: 3 does not divide"),
        (
            {"roles": roles(generators={"gpus_per_pod": 0, "tensor_parallel": 1})},
            "roles.generators.gpus_per_pod: one role has GPUs",
        ),
        ({"roles": roles(trainer={"gpus_per_pod": 0, "group_size": None})}, "roles.trainer.gpus_per_pod: one role"),
        ({"roles": roles(trainer={"group_size": 5})}, "roles.trainer.group_size: group_size 5 does not divide"),
        ({"roles": roles(generators={"gpus_per_pod": 3, "tensor_parallel": 1})}, "roles.generators.gpus_per_pod: 3"),
        ({"roles": roles(generators={"image": "docker.io/vllm:latest"})}, "roles.generators.image: 'docker.io"),
        ({"roles": roles(generators={"tensor_parallel": 2})}, f"roles.generators.tensor_parallel: {TORCH_TP}"),
        (
            {"roles": roles(generators={"tensor_parallel": 2}), "command": "python train.py x rl.engine=torch"},
            f"roles.generators.tensor_parallel: {TORCH_TP}",
        ),
    ],
)
def test_refusals_one_line_exit_2(gkr: Callable[..., Result], tmp_path: Path, changes: Any, expected: str) -> None:
    result = gkr("submit", "-f", job(tmp_path, **changes), "--dry-run")
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert expected in line, line


@pytest.mark.parametrize(
    "command",
    [
        [*GRPO_8B["command"], f"{names.ENGINE_OVERRIDE}={names.VLLM_ENGINE}"],
        [*GRPO_8B["command"], f"++{names.ENGINE_OVERRIDE}={names.VLLM_ENGINE}"],  # Hydra's forced override
        " ".join([*GRPO_8B["command"], f"{names.ENGINE_OVERRIDE}={names.VLLM_ENGINE}"]),  # a string, run by bash -c
    ],
)
def test_tensor_parallel_with_the_vllm_engine(gkr: Callable[..., Result], tmp_path: Path, command: Any) -> None:
    path = job(tmp_path, roles=roles(generators={"tensor_parallel": 2}), command=command)
    result = gkr("submit", "-f", path, "--dry-run", "-o", "yaml")
    assert result.exit_code == 0, result.stderr
    (rayjob,) = yaml.safe_load_all(result.stdout)
    generators = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][1]
    assert env(generators)[names.TENSOR_PARALLEL_ENV] == "2"


def test_roles_with_regions_refused(gkr: Callable[..., Result], tmp_path: Path) -> None:
    path = job(tmp_path, region=None, regions={"us-central1": {"replica_groups": 1}, "us-east4": {"replica_groups": 1}})
    result = gkr("submit", "-f", path, "--dry-run")
    assert result.exit_code == 2
    assert any("roles: an RL job runs in one region" in line for line in result.stderr.splitlines()), result.stderr


def test_gpus_and_nodes_count_both_roles() -> None:
    resolved, _ = prepare(str(EXAMPLES / "grpo-8b.yaml"), as_flags({}), SHIPPED, None)
    assert (resolved.gpus, resolved.nodes) == (32, 4)
    assert resolved.gpus_text == "trainer 3 pods x 8 GPUs + generators 1 pod x 8 GPUs = 32 GPUs"


def test_quota_and_pool_count_both_roles(gkr: Callable[..., Result], tmp_path: Path) -> None:
    """Generators alone too large for the team's quota: the quota counts them with the trainer."""
    big = roles(generators={"pods": 4000})
    result = gkr("submit", "-f", job(tmp_path, roles=big), "--dry-run")
    assert result.exit_code == 2
    assert (
        "trainer 3 pods x 8 GPUs + generators 4,000 pods x 8 GPUs = 32,024 GPUs, above team research's quota"
        in result.stderr
    )
    assert "3 trainer pods and 4,000 generator pods need 4,003 nodes; pool h200-a has 384" in result.stderr


def test_summary_states_each_roles_arithmetic(gkr: Callable[..., Result]) -> None:
    result = gkr("submit", "-f", str(EXAMPLES / "grpo-8b.yaml"), "--dry-run")
    assert result.exit_code == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines[1] == "trainer 3 pods x 8 H200 = 24 GPUs in 3 replica groups x 8 GPUs (one pod each)"
    assert lines[2].startswith("generators 1 pod x 8 H200, 8 engines of 1; 32 GPUs in all; 804 CPU")
    assert len(lines) == 3  # no warning: the roles are one pod-set group


def entrypoint(tmp_path: Path, **changes: Any) -> str:
    (rayjob,) = prepare(job(tmp_path, **changes), as_flags({}), SHIPPED, None)[1]
    return str(rayjob["spec"]["entrypoint"])


def test_the_collective_preflight_covers_every_gpu_pod_of_both_roles(tmp_path: Path) -> None:
    """The weight sync crosses roles and a bad node anywhere stalls the run: every GPU pod is checked."""
    (rayjob,) = prepare(str(EXAMPLES / "grpo-8b.yaml"), as_flags({}), SHIPPED, None)[1]
    assert rayjob["spec"]["entrypoint"].startswith("python -m preflight.ray_collective --pods 4 --gpus-per-pod 8 ")
    # Roles of different pod sizes: one bundle of the smaller size per pod.
    mixed = roles(trainer={"pods": 2}, generators={"pods": 3, "gpus_per_pod": 4})
    assert entrypoint(tmp_path, roles=mixed).startswith("python -m preflight.ray_collective --pods 5 --gpus-per-pod 4 ")
    cpu = yaml.safe_load((EXAMPLES / "grpo-tiny-cpu.yaml").read_text())
    assert not entrypoint(tmp_path, **cpu, pool=None).startswith("python -m preflight")  # no GPUs, no all-reduce


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        (
            {"roles": roles(trainer={"pods": 2}, generators={"pods": 2})},
            "the trainer (2 pods) and the generators (2 pods) may each get a different block, and the weight sync "
            "would cross blocks: Kueue pairs two pod sets in one domain only when one of them is a single pod; "
            "give one role 1 pod",
        ),
        (
            {"roles": roles(trainer={"pods": 4, "group_size": 16})},
            "Kueue pairs no pod set that is sliced into sub-blocks",
        ),
        (
            {"roles": roles(trainer={"pods": 1}), "topology": {"mode": "required", "level": "host"}},
            "both roles' 16 GPUs do not fit one host; use a wider level",
        ),
    ],
)
def test_roles_kueue_cannot_pair_are_not_grouped_and_say_so(
    gkr: Callable[..., Result], tmp_path: Path, changes: dict[str, Any], why: str
) -> None:
    """Kueue's webhook refuses a pod-set group it cannot place (tests/gkr/test_kueue_admission.py has its rules):
    gkr renders none, and warns that the roles may land in different domains."""
    result = gkr("submit", "-f", job(tmp_path, **changes), "--dry-run", "-o", "yaml")
    assert result.exit_code == 0, result.stderr
    (rayjob,) = yaml.safe_load_all(result.stdout)
    for group in rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
        assert "kueue.x-k8s.io/podset-group-name" not in group["template"]["metadata"]["annotations"]
    (warning,) = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert why in warning, warning


def test_roles_without_a_topology_are_not_grouped(gkr: Callable[..., Result], tmp_path: Path) -> None:
    result = gkr("submit", "-f", job(tmp_path, topology=None), "--dry-run", "-o", "yaml")
    assert result.exit_code == 0, result.stderr
    (rayjob,) = yaml.safe_load_all(result.stdout)
    for group in rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
        assert "kueue.x-k8s.io/podset-group-name" not in group["template"]["metadata"]["annotations"]
    assert "warning:" not in result.stderr
