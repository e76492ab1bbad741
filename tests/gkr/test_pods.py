"""Where pods land and what GPU pods carry: CPU pool placement, NCCL environment, GCS FUSE mounts, images."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import Result

from gkr.checks import image_problem
from gkr.flags import as_flags
from gkr.render import CHECKPOINT_MOUNT, DATASET_MOUNT, NCCL_ENV_SCRIPT, nccl_prelude
from gkr.submit import prepare
from tests.conftest import REPO
from tests.gkr.conftest import EXAMPLES, shipped

SHIPPED = shipped()
FLEET = SHIPPED.registry


def objects(example: str, **flags: Any) -> list[dict[str, Any]]:
    _, objs = prepare(str(EXAMPLES / f"{example}.yaml"), as_flags(flags), SHIPPED, None)
    return objs


def group(job: dict[str, Any], role: str) -> dict[str, Any]:
    cluster = job["spec"]["rayClusterSpec"] if job["kind"] == "RayJob" else job["spec"]
    spec = cluster["headGroupSpec"] if role == "head" else cluster["workerGroupSpecs"][0]
    return dict(spec["template"])


def test_ray_heads_and_cpu_jobs_land_on_the_cpu_pool() -> None:
    for job in (*objects("pretrain-128-nodes"), *objects("persistent-raycluster")):
        head = group(job, "head")["spec"]
        assert head["nodeSelector"] == {"cloud.google.com/gke-nodepool": "cpu"}
        assert head["tolerations"] == []  # no GPU toleration: Kueue admits it on the CPU flavor only
        assert "nvidia.com/gpu" not in head["containers"][0]["resources"]["requests"]
    _, cpu_job = objects("cpu-data-job")
    assert cpu_job["spec"]["template"]["spec"]["nodeSelector"] == {"cloud.google.com/gke-nodepool": "cpu"}


def test_a_cpu_rayjob_puts_its_workers_on_the_cpu_pool_too() -> None:
    (job,) = objects("pretrain-128-nodes", gpus_per_pod=0, pool="cpu", pods=4, cpus_per_pod=16, memory_per_pod_gib=64)
    worker = group(job, "worker")["spec"]
    assert worker["nodeSelector"] == {"cloud.google.com/gke-nodepool": "cpu"}
    assert worker["tolerations"] == []
    assert "command" not in worker["containers"][0]  # no NCCL on CPUs


def test_gpu_pods_tolerate_impending_termination_and_unthrottled_gcsfuse() -> None:
    (job,) = objects("pretrain-128-nodes")
    worker = group(job, "worker")
    toleration = {"key": "cloud.google.com/impending-node-termination", "operator": "Exists", "effect": "NoSchedule"}
    assert toleration in worker["spec"]["tolerations"]
    annotations = worker["metadata"]["annotations"]
    assert {k: annotations[k] for k in annotations if k.startswith("gke-gcsfuse/")} == {
        "gke-gcsfuse/volumes": "true",
        "gke-gcsfuse/cpu-limit": "0",
        "gke-gcsfuse/memory-limit": "0",
        "gke-gcsfuse/ephemeral-storage-limit": "0",
    }
    head = group(job, "head")["metadata"]["annotations"]
    assert "gke-gcsfuse/cpu-limit" not in head  # a CPU pod shares its node: GKE's default sidecar limits
    volumes = {v["name"]: v for v in worker["spec"]["volumes"]}
    assert (
        volumes["checkpoints"]["csi"]["volumeAttributes"]["mountOptions"]
        == f"{CHECKPOINT_MOUNT},only-dir=teams/pretraining"
    )
    assert "metadata-cache:negative-ttl-secs:0" in CHECKPOINT_MOUNT  # shards other pods write appear at once


def test_datasets_are_mounted_read_only_with_caches() -> None:
    _, job = objects("cpu-data-job")
    spec = job["spec"]["template"]["spec"]
    (volume,) = [v for v in spec["volumes"] if v["name"].startswith("dataset-")]
    assert volume["csi"]["readOnly"] is True
    assert volume["csi"]["volumeAttributes"] == {"bucketName": "meridian-datasets-eu", "mountOptions": DATASET_MOUNT}
    assert "file-cache:max-size-mb:-1" in DATASET_MOUNT
    assert "metadata-cache:ttl-secs:-1" in DATASET_MOUNT
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == volume["name"])
    assert mount == {"name": volume["name"], "mountPath": "/data/meridian-datasets-eu", "readOnly": True}
    assert job["spec"]["template"]["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true"


def test_every_gpu_process_loads_the_nccl_environment_through_one_prelude() -> None:
    (rayjob,) = objects("pretrain-128-nodes")
    worker = group(rayjob, "worker")["spec"]
    assert worker["containers"][0]["command"] == [nccl_prelude()]
    assert "MERIDIAN_NCCL_ENV_SCRIPT" not in {e["name"] for e in worker["containers"][0]["env"]}
    assert nccl_prelude(required=False) in worker["initContainers"][0]["command"][2]
    assert "command" not in group(rayjob, "head")["spec"]["containers"][0]  # the head holds no GPU
    _, job = objects("flex-start-finetune", kind="job", pods=2)
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][2].startswith(f"{nccl_prelude()} && ")


def kuberay_args(command: list[str], ray_start: str) -> str:
    """What KubeRay 1.x makes of a Ray container's command (controllers/ray/common/pod.go, and Ray's
    "Specify container commands for Ray head/worker Pods"): `/bin/bash -lc -- "<command> && ulimit -n 65536; ray start ..."`."""
    joined = "".join(f" {part} " for part in command)
    return f"{joined} && ulimit -n 65536; {ray_start}"


@pytest.mark.parametrize("installed", [True, False])
def test_ray_start_inherits_the_nccl_environment_as_kuberay_runs_it(tmp_path: Path, installed: bool) -> None:
    (job,) = objects("pretrain-128-nodes")
    command = group(job, "worker")["spec"]["containers"][0]["command"]
    script = tmp_path / "set_nccl_env.sh"
    if installed:
        script.write_text("export NCCL_NET=gIB NCCL_CROSS_NIC=0 NCCL_SOCKET_IFNAME=eth0\n")
    fake_ray_start = 'echo "ray start sees $NCCL_CROSS_NIC $NCCL_SOCKET_IFNAME $NCCL_TUNER_CONFIG_PATH"'
    args = kuberay_args(command, fake_ray_start).replace(NCCL_ENV_SCRIPT, str(script))
    result = subprocess.run(["/bin/bash", "-c", "--", args], capture_output=True, text=True, timeout=30, check=False)
    if installed:
        assert result.stdout == "ray start sees 0 eth0,eth1 /usr/local/gib/configs/tuner_config_a3u.txtpb\n"
    else:  # never a Ray worker without the NCCL environment: the pod fails with the reason
        assert (result.returncode, result.stdout) == (1, "")
        assert "is the nccl-rdma-installer DaemonSet on this node?" in result.stderr


@pytest.mark.parametrize(
    "image",
    [
        "us-docker.pkg.dev/meridian-train-prod/meridian/trainer:0.1.0",  # the fleet's own, pinned by version
        "us-docker.pkg.dev/meridian-train-prod/meridian/research/sft:2026.11.3",
        "us-docker.pkg.dev/meridian-train-prod/meridian/sft@sha256:" + "a" * 64,
        "us-docker.pkg.dev/meridian-train-prod/meridian/sft:1.2@sha256:" + "b" * 64,
    ],
)
def test_fleet_registry_images_pinned_by_version_or_digest_are_accepted(image: str) -> None:
    assert image_problem(image, FLEET) is None


def test_the_default_image_renders() -> None:
    (job,) = objects("pretrain-128-nodes")
    assert group(job, "worker")["spec"]["containers"][0]["image"] == FLEET.trainer_image


def test_dataset_flag_mounts_the_bucket(gkr: Callable[..., Result]) -> None:
    result = gkr(
        "submit", "-f", str(EXAMPLES / "flex-start-finetune.yaml"), "--dataset", "meridian-datasets-us", "--dry-run"
    )
    assert result.exit_code == 0, result.stderr
    (job,) = yaml.safe_load_all(result.stdout)
    mounts = group(job, "worker")["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "dataset-0", "mountPath": "/data/meridian-datasets-us", "readOnly": True} in mounts


@pytest.mark.parametrize("example", ["pretrain-128-nodes", "cpu-data-job", "persistent-raycluster"])
def test_pods_run_as_the_team_ksa_and_mount_only_the_team_folder(example: str) -> None:
    """The KSA maps to the team's Google account (Workload Identity); the mount is the team's folder alone."""
    for obj in objects(example):
        if obj["kind"] == "Service":
            continue
        team = obj["metadata"]["labels"]["meridian.dev/team"]
        assert obj["metadata"]["namespace"] == f"team-{team}"
        templates = [obj["spec"]["template"]] if obj["kind"] == "Job" else [group(obj, "head"), group(obj, "worker")]
        for template in templates:
            assert template["spec"]["serviceAccountName"] == "trainer"  # the namespace's own, bound to its team
            for volume in template["spec"]["volumes"]:
                csi = volume.get("csi", {})
                if volume["name"] == "checkpoints":
                    options = csi["volumeAttributes"]["mountOptions"].split(",")
                    assert [o for o in options if o.startswith("only-dir")] == [f"only-dir=teams/{team}"]


def test_a_cpu_job_runs_on_the_cpu_pool_it_names(tmp_path: Path) -> None:
    """`pool:` is enforced for CPU pods too: a region with two CPU pools, a job that names the second; the
    Ray head stays on the region's first (the selector is what Kueue admits on: tests/gkr/test_kueue_admission.py)."""
    from gkr import registry
    from tests.gkr.conftest import registry_folder

    text = (REPO / "fleet.yaml").read_text()
    pool = "      - {name: cpu, machine_type: n2-standard-32, max_nodes: 64}\n"
    assert pool in text
    (tmp_path / "fleet.yaml").write_text(
        text.replace(pool, pool + "      - {name: cpu-big, machine_type: n2-standard-32, max_nodes: 8}\n", 1)
    )
    two = registry.load(registry_folder(tmp_path / "fleet.yaml"))
    given = as_flags({"pool": "cpu-big", "region": "us-central1", "team": "research"})
    _, job = prepare(str(EXAMPLES / "cpu-data-job.yaml"), given, two, None)[1]
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {"cloud.google.com/gke-nodepool": "cpu-big"}
    given = as_flags({"pool": "cpu-big", "pods": 4, "gpus_per_pod": 0, "cpus_per_pod": 16, "memory_per_pod_gib": 64})
    (rayjob,) = prepare(str(EXAMPLES / "pretrain-128-nodes.yaml"), given, two, None)[1]
    assert group(rayjob, "worker")["spec"]["nodeSelector"] == {"cloud.google.com/gke-nodepool": "cpu-big"}
    assert group(rayjob, "head")["spec"]["nodeSelector"] == {"cloud.google.com/gke-nodepool": "cpu"}
