"""Deep check Jobs (burn-in, idle sweeps and verifications) and what their results say (pure).

Both run `preflight run --deep --level N` (DCGM diagnostics, multi-node NCCL,
RDMA links; platform/preflight) on one node, with the node's GPUs, and end
after policy.deep_check_timeout_s. Burn-in is level 3 and rides on the
probation Job (warden.actions): the quick preflight as an init container,
then the deep check. A sweep is level 2, a Job of its own in
names.SWEEP_NAMESPACE (a namespace Kueue manages; Warden's own is not) that Kueue admits
as the lowest-priority workload (names.SWEEP_QUEUE, names.SWEEP_PRIORITY),
pinned to its node by nodeSelector (so the scheduler, and Kueue's flavor
assignment, see where it must go) and tolerating only the GPU taints, so a
cordoned node never gets one.

A verification (warden.verify: a tenant's report asked for it) is the same
Job as a sweep, labelled KIND_LABEL=verify and named warden-verify-...: it
runs whether or not sweeps are on, waits for its node's GPUs instead of
being given up while a job uses them, and counts against its own budget.

A finished check is recorded on the Node (names.DEEP_CHECK_ANNOTATION,
contract.health) with the failing check from preflight's termination message,
read with the node-health contract's decoder (health.load_report).
"""

from __future__ import annotations

import hashlib
from typing import Any

from contract import health, names
from contract.problem import Invalid
from warden.observe import parse_time
from warden.policy import Policy
from warden.sweep import JobKind, SweepJob, SweepState
from warden.verify import Request

BURN_IN_LEVEL = 3  # DCGM "long": NVIDIA recommends it before a node enters service
SWEEP_LEVEL = 2  # DCGM "medium": minutes, for nodes in service
TERMINATION_LOG = "/dev/termination-log"  # the kubelet's default terminationMessagePath
SWEEP_APP = "warden-sweep"  # every deep check Job Warden lists: sweeps and verifications
KIND_LABEL = "meridian.dev/deep-check-kind"  # on such a Job: sweep or verify (Warden's own name)
REQUESTED_BY_ANNOTATION = "meridian.dev/requested-by"  # on a verification Job: who asked, and what they reported
NVIDIA_MOUNT = "/usr/local/nvidia"
GPU_TOLERATIONS = [
    {"key": names.GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
    names.QUEUED_TOLERATION,
]


def deep_command(level: int) -> list[str]:
    return ["preflight", "run", "--deep", "--level", str(level), "--termination-log", TERMINATION_LOG]


def container(name: str, image: str, command: list[str], gpus: str) -> dict[str, Any]:
    """A preflight container with the node's GPUs and GKE's NVIDIA driver, as probation has always run it."""
    return {
        "name": name,
        "image": image,
        "command": command,
        "env": [{"name": "LD_LIBRARY_PATH", "value": f"{NVIDIA_MOUNT}/lib64"}],
        "resources": {"limits": {names.GPU_RESOURCE: gpus}},
        "volumeMounts": [{"name": "nvidia", "mountPath": NVIDIA_MOUNT}],
    }


def sweep_job_name(node: str, at: float, kind: JobKind = "sweep") -> str:
    return f"warden-{kind}-{hashlib.sha256(node.encode()).hexdigest()[:8]}-{int(at)}"


def sweep_job(
    node: dict[str, Any], policy: Policy, namespace: str, now: float, request: Request | None = None
) -> dict[str, Any]:
    """An idle sweep's Job, or with `request` the verification it asked for (the same check, labelled verify)."""
    meta = node["metadata"]
    name, pool = str(meta["name"]), str((meta.get("labels") or {}).get(names.NODE_POOL_LABEL, ""))
    gpus = str((node.get("status", {}).get("capacity") or {}).get(names.GPU_RESOURCE, "0"))
    labels = {"app.kubernetes.io/name": SWEEP_APP, "app.kubernetes.io/part-of": "meridian"}
    kind: JobKind = "sweep" if request is None else "verify"
    asked = (
        {}
        if request is None
        else {REQUESTED_BY_ANNOTATION: f"{request.namespace}: {request.kind}: {request.detail}"[:256]}
    )
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": sweep_job_name(name, now, kind),
            "namespace": namespace,
            "labels": {
                **labels,
                names.DEEP_CHECK_NODE_LABEL: name,
                names.NODE_POOL_LABEL: pool,
                names.QUEUE_LABEL: names.SWEEP_QUEUE,
                names.PRIORITY_LABEL: names.SWEEP_PRIORITY,
                KIND_LABEL: kind,
            },
            **({"annotations": asked} if asked else {}),
        },
        "spec": {
            "suspend": True,  # Kueue starts it on admission (its webhook would suspend it anyway)
            "backoffLimit": 0,
            # A pod the scheduler preempts for a job's pod is not a failed check: the Job goes on, and
            # Warden gives it up while its node is busy (warden.sweep).
            "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
            "activeDeadlineSeconds": int(policy.deep_check_timeout_s),
            "ttlSecondsAfterFinished": 86400,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {names.HOSTNAME_LABEL: name, names.NODE_POOL_LABEL: pool},
                    "tolerations": GPU_TOLERATIONS,
                    "priorityClassName": names.SWEEP_PRIORITY,
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "containers": [container("deep-check", policy.probation_image, deep_command(SWEEP_LEVEL), gpus)],
                    "volumes": [{"name": "nvidia", "hostPath": {"path": names.NVIDIA_HOST_PATH}}],
                },
            },
        },
    }


def job_state(job: dict[str, Any]) -> SweepState:
    """pass, fail, running (its pod is ready), or waiting (suspended by Kueue, or its pod not started)."""
    status = job.get("status") or {}
    if status.get("succeeded"):
        return "pass"
    conditions = status.get("conditions") or []
    if any(isinstance(c, dict) and c.get("type") == "Failed" and c.get("status") == "True" for c in conditions):
        return "fail"
    if (job.get("spec") or {}).get("suspend") or not status.get("ready"):
        return "waiting"
    return "running"


def sweep_of(job: dict[str, Any]) -> SweepJob | None:
    """A sweep Job as warden.sweep sees it; None for one without its node label."""
    meta = job.get("metadata") or {}
    labels = meta.get("labels") or {}
    node = labels.get(names.DEEP_CHECK_NODE_LABEL)
    if not isinstance(node, str) or not node:
        return None
    created = parse_time(str(meta.get("creationTimestamp", "")))
    kind: JobKind = "verify" if labels.get(KIND_LABEL) == "verify" else "sweep"
    pool = str(labels.get(names.NODE_POOL_LABEL, ""))
    return SweepJob(node, pool, job_state(job), created, str(meta.get("name")), kind)


def failures(pods: list[dict[str, Any]]) -> tuple[health.Failure, ...]:
    """The failing checks from preflight's termination messages in the Job's pods (written by the kubelet)."""
    found: list[health.Failure] = []
    for pod in pods:
        try:
            statuses = [
                *((pod.get("status") or {}).get("initContainerStatuses") or []),
                *((pod.get("status") or {}).get("containerStatuses") or []),
            ]
            for status in statuses:
                terminated = ((status or {}).get("state") or {}).get("terminated") or {}
                if terminated.get("exitCode") not in (0, None):
                    found.append(_failure(terminated.get("message")))
        except (AttributeError, TypeError):  # a pod not shaped like one: its report is not readable
            found.append(health.Failure(check="deep_check", evidence="the check's pod is unreadable"))
    return tuple(found[:8]) or (health.Failure(check="deep_check", evidence="the check's Job failed without a report"),)


def _failure(message: Any) -> health.Failure:
    """The failure preflight reported, read with the node-health contract's decoder (GPU index included)."""
    try:
        report = health.load_report(message, "termination message") if isinstance(message, str) else None
    except (Invalid, ValueError, RecursionError):
        report = None
    if report is None:
        return health.Failure(check="deep_check", evidence="no readable preflight report")
    return health.Failure(check=report.check, gpu=report.gpu, evidence=report.summary[:512])


def record(kind: health.CheckKind, verdict: health.Verdict, now: float, pods: list[dict[str, Any]]) -> str:
    """The annotation's value for a finished check: verdict, level and, for a failure, what failed."""
    level = BURN_IN_LEVEL if kind == "burn_in" else SWEEP_LEVEL  # a verification is a sweep's check
    found = failures(pods) if verdict == "fail" else ()
    return health.dumps(health.DeepCheck(time=now, kind=kind, verdict=verdict, level=level, failures=found))
