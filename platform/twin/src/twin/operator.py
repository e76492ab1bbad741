"""KubeRay's operator at run time, for the twin: the order it creates a RayJob's pods in, and what it does
when one fails.

twin.kuberay says what each pod is (pure); this module starts them on a twin.kubelet.Kubelet in the
order the RayJob controller does (ray-operator/controllers/ray/rayjob_controller.go at the pinned
commit): the RayCluster's head and its Service, the workers, and, once the head's dashboard answers, the
submitter Job's pod. A Ray container that dies is restarted in place by the kubelet (restartPolicy Always,
KubeRay's default); the operator's own replacement of a deleted pod is not modeled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from twin.kubelet import Kubelet, RunningPod
from twin.kuberay import JobPods, rayjob_pods

__all__ = ["RayJobRun", "rayjob_pods", "start"]


@dataclass
class RayJobRun:
    """One RayJob in the twin: its pods by role."""

    job: JobPods
    head: RunningPod
    workers: dict[str, list[RunningPod]] = field(default_factory=dict)
    submitter: RunningPod | None = None


def start(kubelet: Kubelet, rayjob: dict[str, Any], devices: dict[str, tuple[str, ...]] | None = None) -> RayJobRun:
    """The RayJob's head (its Service names resolving to it), its workers, then the submitter."""
    job = rayjob_pods(rayjob)
    head = kubelet.start(job.cluster.head)
    kubelet.serve(dict(job.services), head)
    run = RayJobRun(job, head)
    for group, pods in job.cluster.workers.items():
        run.workers[group] = [kubelet.start(pod, devices=(devices or {}).get(group, ())) for pod in pods]
    if job.submitter is not None:
        # The RayJob controller creates the submitter once the RayCluster is Ready: every Ray pod Running and
        # Ready (rayjob_controller.go: JobDeploymentStatusInitializing waits for rayv1.Ready).
        everyone = [head, *(pod for pods in run.workers.values() for pod in pods)]
        kubelet.wait_for(lambda: all(kubelet.ready(pod) for pod in everyone), READY_S, "the RayCluster Ready")
        run.submitter = kubelet.start(job.submitter)
    return run


READY_S = 600  # the pods' images start Ray in seconds; this bounds a cluster that never turns Ready
