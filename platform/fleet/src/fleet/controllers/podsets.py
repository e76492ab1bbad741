"""The Workload Kueue v0.19.2 makes of a job object: its PodSets, each with a count, a pod template and a
topology request (pure).

- batch Job (`pkg/controller/jobs/job/job_controller.go` `PodSets`, `podsCount`): one PodSet `main`, as
  many pods as `parallelism` (at most `completions`).
- RayJob (`pkg/controller/jobs/rayjob/rayjob_controller.go` `PodSets`, `addSubmitterPodSet`,
  `addSidecarSubmitterToHeadPodSet`; `pkg/controller/jobs/raycluster/common.go` `BuildPodSets`,
  `effectiveWorkerCount`): `head` (1 pod), one PodSet per worker group named after the group in lower case
  (`replicas`, default 1, times `numOfHosts`), and in K8sJobMode (KubeRay's default,
  ray-operator/apis/ray/v1/rayjob_types.go `SubmissionMode`) a `submitter` PodSet of one pod: the
  `submitterPodTemplate`, or KubeRay's default submitter (the head's image, requests 500m CPU and 200Mi,
  limits 1 CPU and 1Gi: `defaultSubmitterResources`) with no node selector. In SidecarMode the submitter's
  default resources join the head instead. A RayJob with a `clusterSelector` and no `rayClusterSpec` is not
  Kueue's (`Skip`); with both, the webhook refuses it.
- RayCluster (`pkg/controller/jobs/raycluster/raycluster_controller.go` `PodSets`): head and worker groups.
- Pod, and each pod of a Deployment (`pkg/controller/jobs/deployment`: the webhook passes the queue name to
  the pods, which the pod integration admits one by one): one PodSet `main` of one pod.

The topology request comes from the pod template's annotations
(`pkg/controller/jobframework/tas.go` `podSetTopologyRequestBuilder.Build`): required, else preferred,
else unconstrained; the slice layer (`podset-slice-required-topology` with `podset-slice-size`); the
PodSet group, only with required or preferred. A PodSet asks for TAS explicitly when any of those is set
(`pkg/workload/workload.go` `IsExplicitlyRequestingTAS`). The multi-layer slice annotation
(`podset-slice-required-topology-constraints`, gate TASMultiLayerTopology) is not read: Meridian does not
write it. Neither is the Ray autoscaler's or GCS fault tolerance's share of the head (Meridian sets neither;
a Kueue RayJob with the in-tree autoscaler is refused anyway: kueue.refusals).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from contract import names

Obj = dict[str, Any]

REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
SLICE_LEVEL = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
GROUP = "kueue.x-k8s.io/podset-group-name"

# KubeRay's default submitter container, as Kueue mirrors it (rayjob_controller.go defaultSubmitterResources).
SUBMITTER_RESOURCES = {"requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
K8S_JOB_MODE, SIDECAR_MODE = "K8sJobMode", "SidecarMode"


@dataclass(frozen=True)
class Topology:
    """A PodSet's topology request, as Kueue reads it from the pod template's annotations."""

    required: str | None = None
    preferred: str | None = None
    unconstrained: bool | None = None
    slice_level: str | None = None
    slice_size: int | None = None
    group: str | None = None

    @property
    def explicit(self) -> bool:
        """Whether the PodSet asks for TAS itself (`IsExplicitlyRequestingTAS`); else TAS is at most implied."""
        return any(v is not None for v in (self.required, self.preferred, self.unconstrained, self.slice_level))

    @property
    def level(self) -> str | None:
        return self.required or self.preferred


def topology(annotations: Mapping[str, str]) -> Topology:
    """The request `podSetTopologyRequestBuilder.Build` makes; a malformed number is left to the webhook."""
    required = annotations.get(REQUIRED)
    preferred = annotations.get(PREFERRED) if required is None else None  # Build's switch: the first found wins
    unconstrained = None
    if required is None and preferred is None and UNCONSTRAINED in annotations:
        unconstrained = str(annotations[UNCONSTRAINED]).lower() == "true"
    slice_level, size = annotations.get(SLICE_LEVEL), annotations.get(SLICE_SIZE)
    slice_size = int(size) if slice_level is not None and size is not None and str(size).isdigit() else None
    if slice_size is None:
        slice_level = None  # Build sets the slice layer only when both annotations are there
    group = annotations.get(GROUP) if (required or preferred) else None
    return Topology(required, preferred, unconstrained, slice_level, slice_size, group)


@dataclass(frozen=True)
class PodSet:
    name: str
    count: int
    template: Obj  # the pod template: metadata and spec
    where: str  # the template's path in the object, for messages

    @property
    def spec(self) -> Obj:
        return dict(self.template.get("spec") or {})

    @property
    def topology(self) -> Topology:
        return topology((self.template.get("metadata") or {}).get("annotations") or {})


@dataclass(frozen=True)
class Workload:
    kind: str
    namespace: str
    name: str
    labels: Mapping[str, str]
    podsets: tuple[PodSet, ...]
    source: Obj = field(repr=False)

    @property
    def queue(self) -> str | None:
        return self.labels.get(names.QUEUE_LABEL)

    @property
    def where(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _ray_podsets(cluster: Obj, at: str) -> list[PodSet]:
    """`BuildPodSets`: the head, then one PodSet per worker group."""
    head = (cluster.get("headGroupSpec") or {}).get("template") or {}
    podsets = [PodSet("head", 1, head, f"{at}.headGroupSpec.template")]
    for i, group in enumerate(cluster.get("workerGroupSpecs") or []):
        count = _int(group.get("replicas"), 1) * max(_int(group.get("numOfHosts"), 1), 1)
        name = str(group.get("groupName", "")).lower()
        podsets.append(PodSet(name, count, group.get("template") or {}, f"{at}.workerGroupSpecs[{i}].template"))
    return podsets


def _submitter(job: Obj, head: PodSet) -> PodSet:
    custom = job["spec"].get("submitterPodTemplate")
    if custom:
        return PodSet("submitter", 1, custom, "spec.submitterPodTemplate")
    image = ((head.spec.get("containers") or [{}])[0]).get("image")
    container = {"name": "ray-job-submitter", "image": image, "resources": SUBMITTER_RESOURCES}
    return PodSet(
        "submitter", 1, {"spec": {"containers": [container], "restartPolicy": "Never"}}, "(KubeRay's default)"
    )


def _rayjob_podsets(job: Obj) -> list[PodSet]:
    spec = job.get("spec") or {}
    podsets = _ray_podsets(spec.get("rayClusterSpec") or {}, "spec.rayClusterSpec")
    mode = spec.get("submissionMode") or K8S_JOB_MODE
    if mode == K8S_JOB_MODE:
        podsets.append(_submitter(job, podsets[0]))
    elif mode == SIDECAR_MODE:
        head = podsets[0]
        template = {**head.template, "spec": {**head.spec}}
        sidecar = {"name": "ray-job-submitter", "resources": SUBMITTER_RESOURCES}
        template["spec"]["containers"] = [*(head.spec.get("containers") or []), sidecar]
        podsets[0] = PodSet(head.name, 1, template, head.where)
    return podsets


def _job_podsets(job: Obj) -> list[PodSet]:
    spec = job.get("spec") or {}
    count = _int(spec.get("parallelism"), 1)  # the API server defaults parallelism to 1
    completions = spec.get("completions")
    if isinstance(completions, int) and completions < count:
        count = completions
    return [PodSet("main", count, spec.get("template") or {}, "spec.template")]


def workload(o: Obj) -> Workload | None:
    """The Workload Kueue makes of `o`; None for a kind no Kueue integration Meridian enables manages."""
    kind, spec = o.get("kind"), o.get("spec") or {}
    meta = o.get("metadata") or {}
    podsets: list[PodSet]
    if kind == "Job" and str(o.get("apiVersion", "")).startswith("batch/"):
        podsets = _job_podsets(o)
    elif kind == "RayJob":
        if spec.get("clusterSelector") and not spec.get("rayClusterSpec"):
            # Runs on an existing cluster: Kueue skips it (rayjob_controller.go Skip). With a rayClusterSpec too,
            # Kueue's webhook refuses it at creation (refusals), before Skip could apply.
            return None
        podsets = _rayjob_podsets(o)
    elif kind == "RayCluster":
        podsets = _ray_podsets(spec, "spec")
    elif kind == "Pod":
        podsets = [PodSet("main", 1, {"metadata": meta, "spec": spec}, "spec")]
    elif kind == "Deployment":
        template = spec.get("template") or {}
        labels = {**(meta.get("labels") or {}), **((template.get("metadata") or {}).get("labels") or {})}
        meta = {**meta, "labels": labels}  # the webhook passes the queue name on to the pods
        podsets = [PodSet("main", 1, template, "spec.template")]
    else:
        return None
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    return Workload(str(kind), str(meta.get("namespace", "")), str(meta.get("name", "")), labels, tuple(podsets), o)
