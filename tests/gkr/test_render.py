"""What the rendered pods get, and where it comes from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from contract import names
from gkr.flags import as_flags
from gkr.render import TERMINATION_LOG, nccl_prelude
from gkr.submit import prepare
from tests.gkr.conftest import EXAMPLES, shipped

SHIPPED = shipped()


def objects(example: str, **given: Any) -> list[dict[str, Any]]:
    _, objs = prepare(str(EXAMPLES / f"{example}.yaml"), as_flags(given), SHIPPED, None)
    return objs


def workers(job: dict[str, Any]) -> dict[str, Any]:
    return dict(job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"])


def test_h200_workers_get_gpu_networking_and_queue() -> None:
    (job,) = objects("pretrain-128-nodes")
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "pretraining"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "high"
    assert job["spec"]["shutdownAfterJobFinishes"] is True
    pod = workers(job)
    spec = pod["spec"]
    # The pool as well as the accelerator: the pool is the Kueue flavor (tests/gkr/test_kueue_admission.py).
    assert spec["nodeSelector"] == {
        "cloud.google.com/gke-nodepool": "h200-a",
        "cloud.google.com/gke-accelerator": "nvidia-h200-141gb",
    }
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    interfaces = json.loads(pod["metadata"]["annotations"]["networking.gke.io/interfaces"])
    assert [(i["interfaceName"], i["network"]) for i in interfaces][1:3] == [("eth1", "gvnic-1"), ("eth2", "rdma-0")]
    assert interfaces[-1] == {"interfaceName": "eth9", "network": "rdma-7"}
    assert (
        pod["metadata"]["annotations"]["kueue.x-k8s.io/podset-preferred-topology"]
        == "cloud.google.com/gce-topology-block"
    )
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    assert mounts == {
        "nvidia": "/usr/local/nvidia",
        "gib": "/usr/local/gib",
        "shm": "/dev/shm",
        "checkpoints": "/checkpoints",
    }
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["shm"]["emptyDir"]["medium"] == "Memory"
    assert volumes["checkpoints"]["csi"]["volumeAttributes"]["bucketName"] == "meridian-ckpt-us-central1"
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert env["NCCL_NET"] == "gIB"
    assert env["LD_LIBRARY_PATH"].startswith("/usr/local/nvidia/lib64")
    (preflight,) = spec["initContainers"]
    assert preflight["command"][:2] == ["bash", "-c"]
    assert "exec preflight run --check kernel-log" in preflight["command"][2]
    assert "--expect-gpus=8" in preflight["command"][2]
    assert spec["serviceAccountName"] == "trainer"


def test_preflight_finds_its_command_in_the_images_virtualenv() -> None:
    """The init container sets PATH (the driver's bin first): the image's virtualenv, where `preflight` is
    installed, must stay on it, first (tests/test_images.py holds the images to the same directory)."""
    (job,) = objects("pretrain-128-nodes")
    (preflight,) = workers(job)["spec"]["initContainers"]
    path = next(e["value"] for e in preflight["env"] if e["name"] == "PATH").split(":")
    assert path[0] == names.IMAGE_VENV_BIN
    assert "/usr/local/nvidia/bin" in path  # nvidia-smi, from the host's driver mount


def test_preflight_runs_as_root_with_only_syslog() -> None:
    """A non-root process gets none of the added capabilities as effective ones under containerd
    (kubernetes/kubernetes#56374): the kernel-log check runs as root, with every other capability dropped."""
    (job,) = objects("pretrain-128-nodes")
    spec = workers(job)["spec"]
    (preflight,) = spec["initContainers"]
    assert preflight["securityContext"] == {
        "runAsUser": 0,
        "runAsNonRoot": False,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"], "add": list(names.TEAM_CAPABILITIES)},
    }
    assert preflight["terminationMessagePath"] == TERMINATION_LOG  # the one file it writes: the kubelet's mount
    # The job's own container keeps the image's user (no runAsUser) and adds nothing.
    (main,) = spec["containers"]
    assert main["securityContext"] == {"allowPrivilegeEscalation": False}


def test_pods_that_mount_a_bucket_may_write_it_as_the_images_user() -> None:
    """The GCS FUSE driver mounts with gid=<fsGroup>, file-mode=664, dir-mode=775 only when the pod has an
    fsGroup; without one only root could write a checkpoint (found by make twin: PermissionError on /checkpoints)."""
    (job,) = objects("pretrain-128-nodes")
    spec = workers(job)["spec"]
    assert any("csi" in volume for volume in spec["volumes"])
    assert spec["securityContext"] == {"fsGroup": names.IMAGE_GID}


def test_no_preflight_drops_the_init_container() -> None:
    (job,) = objects("pretrain-128-nodes", preflight=False)
    assert workers(job)["spec"]["initContainers"] == []


def test_flex_start_pods_tolerate_queued_nodes() -> None:
    (job,) = objects("flex-start-finetune")
    keys = {t["key"] for t in workers(job)["spec"]["tolerations"]}
    assert keys == {"nvidia.com/gpu", "cloud.google.com/gke-queued", "cloud.google.com/impending-node-termination"}


def test_indexed_job_runs_the_collective_check_first() -> None:
    service, job = objects("flex-start-finetune", kind="job", pods=4, topology={"mode": "required", "level": "host"})
    assert service["spec"]["clusterIP"] == "None"
    spec = job["spec"]["template"]["spec"]
    assert spec["subdomain"] == "sft-eval-sweep"
    assert spec["restartPolicy"] == "Never"
    script = spec["containers"][0]["command"][2]
    assert script.startswith(
        f"{nccl_prelude()} && RANK=$JOB_COMPLETION_INDEX preflight run --check allreduce --min-busbw-gbps=256"
    )
    assert script.endswith(
        "&& exec python train.py configs/config.yaml model=small run.launcher=ray ft.device=cuda run.name=sft-eval-sweep"
    )
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    node_name = {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    assert node_name in spec["containers"][0]["env"]
    assert (env["MASTER_ADDR"], env["WORLD_SIZE"]) == ("sft-eval-sweep-0.sft-eval-sweep", "4")
    assert (
        job["spec"]["template"]["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"]
        == "cloud.google.com/gce-topology-host"
    )


@pytest.mark.parametrize("example", ["cpu-data-job"])
def test_cpu_pods_get_no_gpu_settings(example: str) -> None:
    _, job = objects(example)
    spec = job["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"cloud.google.com/gke-nodepool": "cpu"}  # the region's CPU pool, never H200
    assert spec["tolerations"] == []
    assert spec["initContainers"] == []
    assert "nvidia.com/gpu" not in spec["containers"][0]["resources"]["requests"]
    assert "networking.gke.io/interfaces" not in job["spec"]["template"]["metadata"]["annotations"]


def test_schema_check_agrees_with_jsonschema() -> None:
    import copy

    import jsonschema

    from contract.openapi import errors

    (job,) = objects("pretrain-128-nodes")
    schema = json.loads((SHIPPED.schemas / "ray.io_v1_RayJob.json").read_text())
    mutations = [
        lambda j: j["spec"].update(entrypoint=5),
        lambda j: j["spec"].update(shutdownAfterJobFinishes="yes"),
        lambda j: j["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].update(replicas="many"),
        lambda j: j["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].update(unknownField=1),
        lambda j: j["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].pop("groupName"),
        lambda j: j["spec"].update(submissionMode="Whenever"),
        lambda j: j["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0].update(image=None),
        lambda j: None,
    ]
    for mutate in mutations:
        candidate = copy.deepcopy(job)
        mutate(candidate)  # type: ignore[no-untyped-call]
        ours = list(errors(candidate, schema))
        theirs = list(jsonschema.Draft202012Validator(schema).iter_errors(candidate))
        assert bool(ours) == bool(theirs), (ours, [e.message for e in theirs])


def test_rayjob_entrypoint_runs_the_cross_pod_check_first() -> None:
    (job,) = objects("pretrain-128-nodes")
    assert job["spec"]["entrypoint"] == (
        "python -m preflight.ray_collective --pods 128 --gpus-per-pod 8 --min-busbw-gbps=256 && "
        "python train.py configs/config.yaml model=small optim=diloco run.launcher=ray ft.device=cuda run.name=llama-70b-pretrain"
    )
    (job,) = objects("pretrain-128-nodes", preflight=False)
    assert (
        job["spec"]["entrypoint"]
        == "python train.py configs/config.yaml model=small optim=diloco run.launcher=ray ft.device=cuda run.name=llama-70b-pretrain"
    )


@pytest.mark.parametrize(
    ("given", "pool"),
    [
        ({}, "h200-flex"),
        ({"kind": "job"}, "h200-flex"),  # an indexed Job's pods too
        ({"pool": "h200-a"}, "h200-a"),
    ],
)
def test_every_gpu_pod_selects_its_pool(given: dict[str, Any], pool: str) -> None:
    """Kueue gives a pod only a flavor whose nodeLabels its selector matches: the pool is what it admits on."""
    for obj in objects("flex-start-finetune", **given):
        if obj["kind"] == "Job":
            spec = obj["spec"]["template"]["spec"]
        elif obj["kind"] == "RayJob":
            spec = workers(obj)["spec"]
        else:
            continue
        assert spec["nodeSelector"][names.NODE_POOL_LABEL] == pool


def edited(tmp_path: Path, example: str, **changes: Any) -> list[dict[str, Any]]:
    """An example with some keys changed, as a job file (keys without a flag, such as `ray`)."""
    path = tmp_path / f"{example}.yaml"
    path.write_text(yaml.safe_dump({**yaml.safe_load((EXAMPLES / f"{example}.yaml").read_text()), **changes}))
    return prepare(str(path), as_flags({}), SHIPPED, None)[1]


def test_rayjobs_retry_and_have_a_deadline(tmp_path: Path) -> None:
    """KubeRay v1.7.0: backoffLimit retries a failed RayJob on a new RayCluster; activeDeadlineSeconds fails one
    attempt that runs too long (gkr/spec.py, render.DEFAULT_BACKOFF_LIMIT say why these defaults)."""
    (job,) = objects("flex-start-finetune")
    assert (job["spec"]["backoffLimit"], job["spec"]["activeDeadlineSeconds"]) == (2, 7 * 24 * 3600)
    assert "ttlSecondsAfterFinished" not in job["spec"]
    (job,) = edited(tmp_path, "flex-start-finetune", ray={"backoff_limit": 0, "deadline_seconds": 3600})
    assert (job["spec"]["backoffLimit"], job["spec"]["activeDeadlineSeconds"]) == (0, 3600)
    (job,) = edited(tmp_path, "flex-start-finetune", ray={"interactive": True})
    assert job["spec"]["backoffLimit"] == 0  # KubeRay refuses retries in interactive mode
    (job,) = objects("pretrain-128-nodes")
    assert job["spec"]["activeDeadlineSeconds"] == 30 * 24 * 3600  # a run of weeks says so


def test_a_raycluster_has_neither() -> None:
    (cluster,) = objects("persistent-raycluster")
    assert "backoffLimit" not in cluster["spec"]
    assert "activeDeadlineSeconds" not in cluster["spec"]
