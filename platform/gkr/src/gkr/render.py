"""Render a resolved job into Kubernetes objects through the package's Jinja templates.

The pod settings that depend on the machine (accelerator selector, GPU
toleration, RDMA networks, driver and gIB mounts, NCCL environment) come from
the fleet's pool and machine definitions, never from literals in templates.
"""

from __future__ import annotations

import json
import shlex
from functools import cache
from typing import Any

import yaml
from jinja2 import Environment, PackageLoader, StrictUndefined

from fleet import names
from gkr.resolve import Resolved

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

CHECKPOINT_DIR = "/checkpoints"
NCCL_ENV_SCRIPT = "/usr/local/gib/scripts/set_nccl_env.sh"
RENDEZVOUS_PORT = 29500
NODE_CHECKS = ("kernel-log", "gpu-state", "nccl", "rdma-interfaces", "shm")
LEVEL_LABELS = dict(zip(("block", "subblock", "host"), names.TOPOLOGY_LEVELS, strict=False))


DOWNWARD = (("NODE_NAME", "spec.nodeName"), ("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace"))


@cache
def _templates() -> Environment:
    return Environment(
        loader=PackageLoader("gkr", "templates"),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def _interfaces(r: Resolved) -> str:
    nics = [
        {"interfaceName": "eth0", "network": "default"},
        {"interfaceName": "eth1", "network": names.GVNIC_NETWORK_OBJECT},
    ]
    nics += [
        {"interfaceName": f"eth{i + 2}", "network": names.rdma_network_object(i)} for i in range(r.machine.rdma_nics)
    ]
    return json.dumps(nics, separators=(",", ":"))


def pod(r: Resolved, gpu: bool) -> dict[str, Any]:
    """Everything a pod template needs; `gpu` for the pods that hold the job's GPUs."""
    spec, machine = r.spec, r.machine
    rdma = gpu and machine.rdma_nics > 0
    annotations: dict[str, str] = {}
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    # Where the pod runs, for the trainer's NCCLFailure Events (Warden counts them per node).
    env = [{"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}} for name, path in DOWNWARD]
    env += [{"name": k, "value": v} for k, v in sorted(spec.env.items())]
    tolerations = [{"key": names.GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    if r.pool.flex_start:
        tolerations.append(names.QUEUED_TOLERATION)
    if gpu:
        volumes.append({"name": "nvidia", "hostPath": {"path": "/home/kubernetes/bin/nvidia"}})
        mounts.append({"name": "nvidia", "mountPath": "/usr/local/nvidia"})
        library_path = "/usr/local/nvidia/lib64"
        if rdma:
            annotations["networking.gke.io/default-interface"] = "eth0"
            annotations["networking.gke.io/interfaces"] = _interfaces(r)
            volumes.append({"name": "gib", "hostPath": {"path": "/home/kubernetes/bin/gib"}})
            mounts.append({"name": "gib", "mountPath": "/usr/local/gib"})
            library_path += ":/usr/local/gib/lib64"
            env += [
                {"name": "NCCL_NET", "value": "gIB"},
                {"name": "MERIDIAN_NCCL_ENV_SCRIPT", "value": NCCL_ENV_SCRIPT},
            ]
        env.insert(0, {"name": "LD_LIBRARY_PATH", "value": library_path})
        if spec.topology is not None:
            annotations[f"kueue.x-k8s.io/podset-{spec.topology.mode}-topology"] = LEVEL_LABELS[spec.topology.level]
    cpus, memory = (
        (r.cpus, r.memory_gib) if gpu or spec.gpus_per_pod == 0 else (spec.ray.head_cpus, spec.ray.head_memory_gib)
    )
    # Memory-backed /dev/shm for data loaders and NCCL's shared-memory transport (counts against the pod's memory).
    volumes.append({"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{max(1, memory // 2)}Gi"}})
    mounts.append({"name": "shm", "mountPath": "/dev/shm"})
    if spec.checkpoint:
        annotations["gke-gcsfuse/volumes"] = "true"
        volumes.append(
            {
                "name": "checkpoints",
                "csi": {
                    "driver": "gcsfuse.csi.storage.gke.io",
                    "volumeAttributes": {"bucketName": r.region.checkpoint_bucket, "mountOptions": "implicit-dirs"},
                },
            }
        )
        mounts.append({"name": "checkpoints", "mountPath": CHECKPOINT_DIR})
        env.append({"name": "MERIDIAN_CHECKPOINT_DIR", "value": CHECKPOINT_DIR})
    cpus, memory = (
        (r.cpus, r.memory_gib) if gpu or spec.gpus_per_pod == 0 else (spec.ray.head_cpus, spec.ray.head_memory_gib)
    )
    resources: dict[str, Any] = {
        "requests": {"cpu": str(cpus), "memory": f"{memory}Gi"},
        "limits": {"memory": f"{memory}Gi"},
    }
    if gpu:
        resources["requests"][names.GPU_RESOURCE] = str(spec.gpus_per_pod)
        resources["limits"][names.GPU_RESOURCE] = str(spec.gpus_per_pod)
    init = [_preflight(r, mounts)] if gpu and spec.preflight else []
    return {
        "labels": {names.TEAM_LABEL: r.team.name, "meridian.dev/job": spec.name},
        "annotations": annotations,
        "service_account": names.TRAINER_KSA,
        "node_selector": {"cloud.google.com/gke-accelerator": str(machine.gpu_type)} if gpu else {},
        "tolerations": tolerations,
        "init_containers": init,
        "image": r.image,
        "env": env,
        "resources": resources,
        "mounts": mounts,
        "volumes": volumes,
        "ports": [],
        "spec_extra": {},
    }


def _preflight(r: Resolved, mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """Node-local checks before the job's container starts; a failure fails the pod with the reason."""
    checks = [arg for check in NODE_CHECKS for arg in ("--check", check)]
    thresholds = r.machine.preflight_one_node if r.nodes == 1 else r.machine.preflight_many_nodes
    args = [a for a in thresholds if not a.startswith(("--min-tflops", "--min-busbw"))]
    return {
        "name": "preflight",
        "image": r.image,
        "command": ["preflight", "run", *checks, *args, "--annotate"],
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "PATH", "value": "/usr/local/nvidia/bin:/usr/local/bin:/usr/bin:/bin"},
            {"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"},
        ],
        "securityContext": {"capabilities": {"add": ["SYSLOG"]}},  # dmesg
        "volumeMounts": [m for m in mounts if m["name"] in ("nvidia", "gib", "shm")],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def _busbw_threshold(r: Resolved) -> str:
    """The catalog's all-reduce threshold for this job: within one node, or across nodes."""
    thresholds = r.machine.preflight_one_node if r.nodes == 1 else r.machine.preflight_many_nodes
    return next(a for a in thresholds if a.startswith("--min-busbw"))


def _job_command(r: Resolved) -> list[str]:
    """The indexed Job's command: the NCCL environment, the collective check across pods, then the user's command."""
    steps = []
    if r.spec.gpus_per_pod and r.machine.rdma_nics:
        steps.append(f"source {NCCL_ENV_SCRIPT}")
    if r.spec.preflight and r.spec.gpus_per_pod and r.spec.pods > 1:
        steps.append(f"RANK=$JOB_COMPLETION_INDEX preflight run --check allreduce {_busbw_threshold(r)}")
    steps.append(f"exec {shlex.join(r.command)}")
    return ["bash", "-c", " && ".join(steps)]


def _ray_entrypoint(r: Resolved) -> str:
    """The RayJob's entrypoint: the all-reduce across the worker pods (placed by Ray), then the user's command."""
    # The entrypoint is already a shell line: a string command goes in as written.
    command = r.spec.command if isinstance(r.spec.command, str) else shlex.join(r.command)
    if not (r.spec.preflight and r.spec.gpus_per_pod and r.spec.pods > 1):
        return command
    return f"python -m preflight.ray_collective --pods {r.spec.pods} --gpus-per-pod {r.spec.gpus_per_pod} {_busbw_threshold(r)} && {command}"


def render(r: Resolved) -> list[dict[str, Any]]:
    spec = r.spec
    labels = {
        "kueue.x-k8s.io/queue-name": r.queue,
        "kueue.x-k8s.io/priority-class": r.priority,
        names.TEAM_LABEL: r.team.name,
    }
    worker = pod(r, gpu=spec.gpus_per_pod > 0)
    context: dict[str, Any] = {
        "name": spec.name,
        "namespace": r.namespace,
        "labels": labels,
        "pods": spec.pods,
        "ray": spec.ray,
        "worker": worker,
    }
    if spec.kind == "job":
        rendezvous = [
            {"name": "MASTER_ADDR", "value": f"{spec.name}-0.{spec.name}"},
            {"name": "MASTER_PORT", "value": str(RENDEZVOUS_PORT)},
            {"name": "WORLD_SIZE", "value": str(spec.pods)},
        ]
        worker["env"] = worker["env"] + rendezvous
        worker["ports"] = [{"name": "rendezvous", "containerPort": RENDEZVOUS_PORT}]
        worker["spec_extra"] = {"subdomain": spec.name, "restartPolicy": "Never"}
        context["command"] = _job_command(r)
    else:
        context["head"] = pod(r, gpu=False)
        context["entrypoint"] = _ray_entrypoint(r)
    text = _templates().get_template(f"{spec.kind}.yaml.j2").render(**context)
    return [d for d in yaml.load_all(text, Loader=_Loader) if d]
