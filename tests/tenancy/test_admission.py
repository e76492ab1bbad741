"""Tenancy, tested as an attacker: every generated admission policy, evaluated with a real CEL engine.

Each hostile object or request must be refused by a policy's validation (not merely by a CEL error),
in every cluster; every legitimate one (gkr's golden dry-runs, the pods controllers build from them,
platform pods in team namespaces) must be admitted by all of them.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import cel
import pytest
import yaml

from contract import names as contract_names
from contract.registry import REGISTRY_NAMESPACE
from fleet import names
from fleet.gitops import admission, operators
from fleet.gitops.cel import WORKLOAD_KINDS
from fleet.gitops.check import ClusterTree
from fleet.gitops.validate import CrdSchemas, Finding, validate_object
from fleet.model import Fleet
from tests.conftest import REPO
from tests.tenancy.conftest import Policies
from tests.tenancy.vap import RESEARCHER, Obj, Outcome, Request, admit, expressions

GOLDEN = sorted((REPO / "tests" / "gkr" / "golden").glob("*.yaml"))
KINDS = {
    "Pod": ("", "v1", "pods"),
    "Job": ("batch", "v1", "jobs"),
    "RayJob": ("ray.io", "v1", "rayjobs"),
    "RayCluster": ("ray.io", "v1", "rayclusters"),
    "Deployment": ("apps", "v1", "deployments"),
    "Service": ("", "v1", "services"),
}
REPLICASET_CONTROLLER = "system:serviceaccount:kube-system:replicaset-controller"
TRAINER = "system:serviceaccount:team-research:trainer"  # a tenant's own workload identity
AGENT = f"system:serviceaccount:{names.WARDEN_NAMESPACE}:{admission.WARDEN_AGENT_KSA}"
WARDEN = f"system:serviceaccount:{names.WARDEN_NAMESPACE}:{names.WARDEN_KSA}"
# Policies that are not about team namespaces (the agent's own Node, the operators' Argo CD patch).
CLUSTER_WIDE = (admission.AGENT_NODE, operators.SYNC_GUARD)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where built, as the shipped readers


def request(o: Obj, operation: str = "CREATE", user: str = RESEARCHER, sub_resource: str = "") -> Request:
    group, version, resource = KINDS[o["kind"]]
    meta = o["metadata"]
    return Request(
        operation, group, version, resource, o["kind"], meta.get("namespace", ""), meta["name"], sub_resource, user
    )


def golden() -> list[Obj]:
    """gkr's golden objects, a fresh copy per call: attempts edit what they get."""
    return copy.deepcopy(_golden_parsed())


@functools.cache
def _golden_parsed() -> list[Obj]:
    # Parsed once per worker: PyYAML's Python parser took 120 of this module's and test_placement's 140 s.
    return [d for path in GOLDEN for d in yaml.load_all(path.read_text(), Loader=_LOADER) if d and d["kind"] in KINDS]


def _pod(owner: Obj, template: Obj, suffix: str) -> Obj:
    """The pod a controller builds from a template: the template's metadata and spec, owned by `owner`."""
    meta = owner["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{meta['name']}-{suffix}",
            "namespace": meta["namespace"],
            "labels": dict(template.get("metadata", {}).get("labels") or {}),
            "annotations": dict(template.get("metadata", {}).get("annotations") or {}),
            "ownerReferences": [
                {
                    "apiVersion": owner["apiVersion"],
                    "kind": owner["kind"],
                    "name": meta["name"],
                    "uid": "u",
                    "controller": True,
                }
            ],
        },
        "spec": copy.deepcopy(template["spec"]),
    }


def _cluster_pods(cluster: Obj, spec: Obj) -> Iterator[Obj]:
    yield _pod(cluster, spec["headGroupSpec"]["template"], "head")
    for group in spec.get("workerGroupSpecs", []):
        yield _pod(cluster, group["template"], f"{group['groupName']}-0")


def submitter_job(rayjob: Obj) -> Obj:
    """KubeRay's submitter Job for a RayJob in K8sJobMode: no queue label (Kueue manages the RayJob)."""
    meta = rayjob["metadata"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": {"ray.io/originated-from-crd": "RayJob", "app.kubernetes.io/created-by": "kuberay-operator"},
            "ownerReferences": [
                {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": meta["name"], "uid": "u", "controller": True}
            ],
        },
        "spec": {
            "backoffLimit": 2,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "ray-job-submitter",
                            "image": "rayproject/ray:2.41.0",
                            "command": ["ray", "job", "submit"],
                        }
                    ],
                }
            },
        },
    }


def legitimate() -> Iterator[tuple[str, Request, Obj]]:
    """gkr's golden objects as researchers submit them, and what the controllers then create."""
    for o in golden():
        name = f"{o['kind']}/{o['metadata']['name']}"
        yield name, request(o), o
        if o["kind"] == "Job":
            pod = _pod(o, o["spec"]["template"], "0")
            yield f"{name} pod", request(pod, user=admission.JOB_CONTROLLER), pod
        if o["kind"] == "Deployment":  # a run's Lighthouse: its pod comes from the ReplicaSet controller
            pod = _pod(o, o["spec"]["template"], "0")
            yield f"{name} pod", request(pod, user=REPLICASET_CONTROLLER), pod
        if o["kind"] == "RayJob":
            cluster = {
                "apiVersion": "ray.io/v1",
                "kind": "RayCluster",
                "metadata": {
                    "name": f"{o['metadata']['name']}-raycluster",
                    "namespace": o["metadata"]["namespace"],
                    "labels": dict(o["metadata"]["labels"]),
                },
                "spec": o["spec"]["rayClusterSpec"],
            }
            yield f"{name} RayCluster", request(cluster, user=admission.KUBERAY_OPERATOR), cluster
            submitter = submitter_job(o)
            yield f"{name} submitter", request(submitter, user=admission.KUBERAY_OPERATOR), submitter
            pod = _pod(submitter, submitter["spec"]["template"], "submitter")
            yield f"{name} submitter pod", request(pod, user=admission.JOB_CONTROLLER), pod
        if o["kind"] in ("RayJob", "RayCluster"):
            spec = o["spec"]["rayClusterSpec"] if o["kind"] == "RayJob" else o["spec"]
            for pod in _cluster_pods(o, spec):
                yield f"{name} pod {pod['metadata']['name']}", request(pod, user=admission.KUBERAY_OPERATOR), pod


def gpu_job(team: str = "research") -> Obj:
    """A legitimate GPU Job: the golden RayJob's worker template (host mounts, preflight's SYSLOG), as a Job."""
    rayjob = next(o for o in golden() if o["kind"] == "RayJob" and o["metadata"]["name"] == "llama-70b-pretrain")
    template = copy.deepcopy(rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"])
    template["metadata"]["labels"][names.TEAM_LABEL] = team  # the golden RayJob is pretraining's
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "attack",
            "namespace": names.team_namespace(team),
            "labels": {
                admission.QUEUE_LABEL: names.local_queue(team),
                admission.PRIORITY_LABEL: "standard",
                names.TEAM_LABEL: team,
            },
        },
        "spec": {"template": {**template, "spec": {**template["spec"], "restartPolicy": "Never"}}},
    }


def _spec(o: Obj) -> Obj:
    return dict(o["spec"]["template"]["spec"])


# Hostile pod specs: each edits a legitimate GPU pod spec in place.
PodEdit = Callable[[Obj], None]


def _host_path(path: str) -> PodEdit:
    return lambda s: s["volumes"].append({"name": "host", "hostPath": {"path": path}})


def _container(**security: Any) -> PodEdit:
    return lambda s: s["containers"][0].setdefault("securityContext", {}).update(security)


POD_ATTACKS: dict[str, PodEdit] = {
    "privileged container": _container(privileged=True),
    "privileged init container": lambda s: s["initContainers"][0]["securityContext"].update(privileged=True),
    "hostPath /": _host_path("/"),
    "hostPath /var/run": _host_path("/var/run"),
    "hostPath containerd socket": _host_path("/run/containerd/containerd.sock"),
    "hostPath escaping the NVIDIA path": _host_path("/home/kubernetes/bin/nvidia/../../.."),
    "hostPath under the NVIDIA path": _host_path("/home/kubernetes/bin/nvidia/lib64"),
    "hostNetwork": lambda s: s.update(hostNetwork=True),
    "hostPID": lambda s: s.update(hostPID=True),
    "hostIPC": lambda s: s.update(hostIPC=True),
    "added NET_ADMIN": _container(capabilities={"add": ["NET_ADMIN"]}),
    "added CAP_SYS_ADMIN beside SYSLOG": lambda s: s["initContainers"][0]["securityContext"]["capabilities"][
        "add"
    ].append("CAP_SYS_ADMIN"),
    "allowPrivilegeEscalation": _container(allowPrivilegeEscalation=True),
    "hostPort": lambda s: s["containers"][0].setdefault("ports", []).append({"containerPort": 22, "hostPort": 22}),
    "unmasked /proc": _container(procMount="Unmasked"),
    "unconfined seccomp": lambda s: s.update(securityContext={"seccompProfile": {"type": "Unconfined"}}),
    "unconfined AppArmor": _container(appArmorProfile={"type": "Unconfined"}),
    "SELinux spc_t": _container(seLinuxOptions={"type": "spc_t"}),
    "unsafe sysctl": lambda s: s.update(securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}),
    "pod PriorityClass": lambda s: s.update(priorityClassName="system-node-critical"),
}


@dataclass(frozen=True)
class Attempt:
    request: Request
    obj: Obj | None
    old: Obj | None = None


def _hostile_pods(edit: PodEdit) -> Iterator[Attempt]:
    """The edit in a researcher's Job (refused at submission) and in the pod the Job controller would create."""
    job = gpu_job()
    spec = copy.deepcopy(_spec(job))
    edit(spec)
    job["spec"]["template"]["spec"] = spec
    yield Attempt(request(job), job)
    pod = _pod(job, job["spec"]["template"], "0")
    yield Attempt(request(pod, user=admission.JOB_CONTROLLER), pod)


def _relabel(o: Obj, **labels: str | None) -> Obj:
    o = copy.deepcopy(o)
    for key, value in labels.items():
        real = {"queue": admission.QUEUE_LABEL, "priority": admission.PRIORITY_LABEL}[key]
        if value is None:
            o["metadata"]["labels"].pop(real, None)
        else:
            o["metadata"]["labels"][real] = value
    return o


def _golden(kind: str, name: str) -> Obj:
    return next(o for o in golden() if o["kind"] == kind and o["metadata"]["name"] == name)


def _bare_pod(queue: str | None, user: str, owner: Obj | None = None) -> Attempt:
    job = gpu_job()
    pod = _pod(job, job["spec"]["template"], "bare")
    if owner is None:
        del pod["metadata"]["ownerReferences"]
    if queue is not None:
        pod["metadata"]["labels"][admission.QUEUE_LABEL] = queue
    return Attempt(request(pod, user=user), pod)


def _update(old: Obj, new: Obj) -> Attempt:
    return Attempt(request(new, operation="UPDATE"), new, old)


def _node_status(node: str, user: str, bound_to: str | None) -> Attempt:
    extra = {admission.NODE_NAME_EXTRA: [bound_to]} if bound_to else {}
    status = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}, "status": {"conditions": []}}
    req = Request("UPDATE", "", "v1", "nodes", "Node", "", node, "status", user, extra=extra)
    return Attempt(req, status, status)


QUEUE_ATTACKS: dict[str, Callable[[], Iterator[Attempt]]] = {
    "Job without queue label": lambda: iter([Attempt(request(j), j) for j in [_relabel(gpu_job(), queue=None)]]),
    "Job with another team's LocalQueue": lambda: iter(
        [Attempt(request(j), j) for j in [_relabel(gpu_job(), queue="pretraining")]]
    ),
    "Job with a made-up queue": lambda: iter(
        [Attempt(request(j), j) for j in [_relabel(gpu_job(), queue="free-gpus")]]
    ),
    "RayJob without queue label": lambda: iter(
        [Attempt(request(j), j) for j in [_relabel(_golden("RayJob", "llama-70b-pretrain"), queue=None)]]
    ),
    "RayCluster with another team's LocalQueue": lambda: iter(
        [Attempt(request(j), j) for j in [_relabel(_golden("RayCluster", "research-dev"), queue="pretraining")]]
    ),
    "bare pod without queue label": lambda: iter([_bare_pod(None, RESEARCHER)]),
    "bare pod from the team's own service account": lambda: iter([_bare_pod(None, TRAINER)]),
    "bare pod with a forged Job owner": lambda: iter([_bare_pod(None, RESEARCHER, owner=gpu_job())]),
    "bare pod with another team's LocalQueue": lambda: iter([_bare_pod("pretraining", RESEARCHER)]),
    "controller-created pod with another team's LocalQueue": lambda: iter(
        [_bare_pod("pretraining", admission.JOB_CONTROLLER)]
    ),
    "update dropping the queue label": lambda: iter([_update(gpu_job(), _relabel(gpu_job(), queue=None))]),
    "update moving to another team's LocalQueue": lambda: iter(
        [_update(gpu_job(), _relabel(gpu_job(), queue="evals"))]
    ),
}

PRIORITY_ATTACKS: dict[str, Callable[[], Iterator[Attempt]]] = {
    # research: default standard, ceiling high
    "RayJob above the ceiling": lambda: iter(
        [Attempt(request(j), j) for j in [_relabel(_golden("RayJob", "sft-eval-sweep"), priority="critical")]]
    ),
    "Job above the ceiling": lambda: iter([Attempt(request(j), j) for j in [_relabel(gpu_job(), priority="critical")]]),
    # evals: no max_priority, so the ceiling is its default, standard
    "Job above the default-only ceiling": lambda: iter(
        [Attempt(request(j), j) for j in [_relabel(_golden("Job", "cpu-seed-sweep"), priority="high")]]
    ),
    "unknown priority class": lambda: iter([Attempt(request(j), j) for j in [_relabel(gpu_job(), priority="urgent")]]),
    "update raising the priority": lambda: iter([_update(gpu_job(), _relabel(gpu_job(), priority="critical"))]),
    "bare pod above the ceiling": lambda: iter(
        [Attempt(request(p), p) for p in [_relabel(_bare_pod("research", RESEARCHER).obj or {}, priority="critical")]]
    ),
}


def lighthouse(kind: str) -> Obj:
    """The cross-region example's Lighthouse Deployment or Service, as gkr renders it."""
    found = (o for o in golden() if o["kind"] == kind and contract_names.RUN_LABEL in o["metadata"].get("labels", {}))
    return copy.deepcopy(next(found))


def _edited(kind: str, edit: Callable[[Obj], None]) -> Callable[[], Iterator[Attempt]]:
    """Creating the Lighthouse's `kind` once `edit` has changed it."""

    def attempts() -> Iterator[Attempt]:
        lighthouse_object = lighthouse(kind)
        edit(lighthouse_object)
        yield Attempt(request(lighthouse_object), lighthouse_object)

    return attempts


def _service(edit: Callable[[Obj], None]) -> Callable[[], Iterator[Attempt]]:
    return _edited("Service", edit)


def _external(s: Obj) -> None:
    del s["metadata"]["annotations"][names.INTERNAL_LB_ANNOTATION]


def _made_public() -> Iterator[Attempt]:
    old = lighthouse("Service")
    new = copy.deepcopy(old)
    _external(new)
    yield _update(old, new)


SERVICE_ATTACKS: dict[str, Callable[[], Iterator[Attempt]]] = {
    "NodePort": _service(lambda s: s["spec"].update(type="NodePort")),
    "external LoadBalancer": _service(_external),
    "LoadBalancer marked External": _service(
        lambda s: s["metadata"]["annotations"].update({names.INTERNAL_LB_ANNOTATION: "External"})
    ),
    "internal LoadBalancer open to the world": _service(
        lambda s: s["spec"].update(loadBalancerSourceRanges=["0.0.0.0/0"])
    ),
    "internal LoadBalancer without source ranges": _service(lambda s: s["spec"].pop("loadBalancerSourceRanges")),
    "LoadBalancer with another class": _service(
        lambda s: s["spec"].update(loadBalancerClass="networking.gke.io/l4-regional-external")
    ),
    "ExternalName": _service(lambda s: s["spec"].update(type="ExternalName", externalName="evil.example.com")),
    "ClusterIP with externalIPs": _service(lambda s: s["spec"].update(type="ClusterIP", externalIPs=["10.0.0.1"])),
    "update making the Lighthouse public": _made_public,
}


def _deployment(edit: Callable[[Obj], None]) -> Callable[[], Iterator[Attempt]]:
    return _edited("Deployment", edit)


def _gpu(d: Obj) -> None:
    d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][names.GPU_RESOURCE] = "8"


DEPLOYMENT_ATTACKS: dict[str, Callable[[], Iterator[Attempt]]] = {
    "requesting GPUs": _deployment(_gpu),
    "GPUs in an init container": _deployment(
        lambda d: d["spec"]["template"]["spec"].update(
            initContainers=[{"name": "x", "image": "i", "resources": {"requests": {names.GPU_RESOURCE: "1"}}}]
        )
    ),
    "pods without the queue label": _deployment(
        lambda d: d["spec"]["template"]["metadata"]["labels"].pop(admission.QUEUE_LABEL)
    ),
    "pods in another team's queue": _deployment(
        lambda d: d["spec"]["template"]["metadata"]["labels"].update({admission.QUEUE_LABEL: "pretraining"})
    ),
}


def _deployment_pod_without_queue() -> Iterator[Attempt]:
    deployment = lighthouse("Deployment")
    deployment["spec"]["template"]["metadata"]["labels"].pop(admission.QUEUE_LABEL)
    pod = _pod(deployment, deployment["spec"]["template"], "0")
    yield Attempt(request(pod, user=REPLICASET_CONTROLLER), pod)


QUEUE_ATTACKS["Deployment without queue label"] = lambda: iter(
    [Attempt(request(d), d) for d in [_relabel(lighthouse("Deployment"), queue=None)]]
)
QUEUE_ATTACKS["ReplicaSet pod without queue label"] = _deployment_pod_without_queue


def _ephemeral_debugger() -> Iterator[Attempt]:
    """`kubectl debug --profile=sysadmin` on a running team pod: a privileged ephemeral container."""
    job = gpu_job()
    old = _pod(job, job["spec"]["template"], "0")
    new = copy.deepcopy(old)
    new["spec"]["ephemeralContainers"] = [
        {"name": "debugger", "image": "busybox", "securityContext": {"privileged": True}}
    ]
    yield Attempt(request(new, "UPDATE", sub_resource="ephemeralcontainers"), new, old)


def _ephemeral_writer() -> Iterator[Attempt]:
    """An unprivileged debug container that mounts the pod's NVIDIA driver volume read-write.

    Ephemeral containers cannot declare volumes, but they may mount the pod's: a write there replaces
    the driver libraries the node's next tenant loads.
    """
    job = gpu_job()
    old = _pod(job, job["spec"]["template"], "0")
    new = copy.deepcopy(old)
    mount = {"name": "nvidia", "mountPath": "/nvidia"}
    new["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": "busybox", "volumeMounts": [mount]}]
    yield Attempt(request(new, "UPDATE", sub_resource="ephemeralcontainers"), new, old)


POD_REQUESTS: dict[str, Callable[[], Iterator[Attempt]]] = {
    "privileged ephemeral container": _ephemeral_debugger,
    "ephemeral container mounting the NVIDIA driver read-write": _ephemeral_writer,
}


# --- Placement: GPU nodes only for pods that use GPUs; Ray heads on the CPU pool; no spec.nodeName ---

GPU_POOL = "h200-a"  # a GPU pool of every region in fleet.yaml (a Kueue flavor, a node pool)


def _no_gpus(spec: Obj) -> None:
    for c in spec["containers"] + spec.get("initContainers", []):
        for part in ("requests", "limits"):
            c.get("resources", {}).get(part, {}).pop(names.GPU_RESOURCE, None)


def _whole_node_lighthouse(d: Obj) -> None:
    """The issue's attack: a CPU-only Deployment sized to an H200 node, with the GPU toleration and pool."""
    spec = d["spec"]["template"]["spec"]
    spec["containers"][0]["resources"] = {
        "requests": {"cpu": "200", "memory": "2600Gi"},
        "limits": {"cpu": "200", "memory": "2600Gi"},
    }
    spec["nodeSelector"] = {names.NODE_POOL_LABEL: GPU_POOL}
    spec["tolerations"] = [{"key": names.GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]


def _whole_node_lighthouse_pods() -> Iterator[Attempt]:
    deployment = lighthouse("Deployment")
    _whole_node_lighthouse(deployment)
    yield Attempt(request(deployment), deployment)
    pod = _pod(deployment, deployment["spec"]["template"], "0")
    yield Attempt(request(pod, user=REPLICASET_CONTROLLER), pod)


def _cpu_job(edit: PodEdit) -> Callable[[], Iterator[Attempt]]:
    """gkr's CPU Job (evals) with `edit` applied to its pod spec, and the pod the Job controller builds."""

    def attempts() -> Iterator[Attempt]:
        job = _golden("Job", "cpu-seed-sweep")
        edit(job["spec"]["template"]["spec"])
        yield Attempt(request(job), job)
        pod = _pod(job, job["spec"]["template"], "0")
        yield Attempt(request(pod, user=admission.JOB_CONTROLLER), pod)

    return attempts


def _gpu_job_without_gpus(edit: PodEdit) -> Callable[[], Iterator[Attempt]]:
    """The GPU Job (toleration, accelerator selector) with no GPU requested, then `edit`."""

    def change(spec: Obj) -> None:
        _no_gpus(spec)
        edit(spec)

    return functools.partial(_hostile_pods, change)


def _node_term(expression: Obj) -> PodEdit:
    def edit(spec: Obj) -> None:
        spec.setdefault("affinity", {})["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [expression]}]
            }
        }

    return edit


def _preferred(expression: Obj) -> PodEdit:
    def edit(spec: Obj) -> None:
        spec.setdefault("affinity", {})["nodeAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "preference": {"matchExpressions": [expression]}}
            ]
        }

    return edit


def _zero_gpus(spec: Obj) -> None:
    for part in ("requests", "limits"):
        spec["containers"][0]["resources"][part][names.GPU_RESOURCE] = "0"


def _ray_head(kind: str, name: str, edit: PodEdit) -> Callable[[], Iterator[Attempt]]:
    """A golden RayCluster or RayJob whose head pod spec gets `edit`, and the head pod KubeRay builds."""

    def attempts() -> Iterator[Attempt]:
        o = _golden(kind, name)
        spec = o["spec"]["rayClusterSpec"] if kind == "RayJob" else o["spec"]
        edit(spec["headGroupSpec"]["template"]["spec"])
        yield Attempt(request(o), o)
        head = _pod(o, spec["headGroupSpec"]["template"], "head")
        head["metadata"]["labels"][contract_names.RAY_NODE_TYPE_LABEL] = "head"  # KubeRay's
        yield Attempt(request(head, user=admission.KUBERAY_OPERATOR), head)

    return attempts


def _gpu_head(spec: Obj) -> None:
    """The issue's 8-GPU head: the worker's placement and GPUs on the head."""
    spec["nodeSelector"] = {contract_names.ACCELERATOR_LABEL: "nvidia-h200-141gb"}
    spec["tolerations"] = [{"key": names.GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    resources = spec["containers"][0].setdefault("resources", {})
    for part in ("requests", "limits"):
        resources.setdefault(part, {})[names.GPU_RESOURCE] = "8"


def _head_gpus_only(spec: Obj) -> None:
    resources = spec["containers"][0].setdefault("resources", {})
    resources.setdefault("limits", {})[names.GPU_RESOURCE] = "1"


Target = Callable[[], tuple[Obj, Obj]]  # an object, and the part of it an attack edits
VICTIM_NODE = "gke-meridian-us-central1-h200-a-victim"  # another team's node


def _pinned(target: Target) -> Callable[[], Iterator[Attempt]]:
    """An object whose pod spec names a node: the scheduler, its taints and Kueue's placement skipped."""

    def attempts() -> Iterator[Attempt]:
        o, spec = target()
        spec["nodeName"] = VICTIM_NODE
        yield Attempt(request(o), o)

    return attempts


def _job_spec() -> tuple[Obj, Obj]:
    job = gpu_job()
    return job, job["spec"]["template"]["spec"]


def _pod_spec() -> tuple[Obj, Obj]:
    job = gpu_job()
    pod = _pod(job, job["spec"]["template"], "0")
    return pod, pod["spec"]


def _worker_spec() -> tuple[Obj, Obj]:
    cluster = _golden("RayCluster", "research-dev")
    return cluster, cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]


def _deployment_spec() -> tuple[Obj, Obj]:
    deployment = lighthouse("Deployment")
    return deployment, deployment["spec"]["template"]["spec"]


def _pinned_pod_by_controller() -> Iterator[Attempt]:
    o, spec = _pod_spec()
    spec["nodeName"] = VICTIM_NODE
    yield Attempt(request(o, user=admission.JOB_CONTROLLER), o)


GPU_TOLERATION = {"key": names.GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}

PLACEMENT_ATTACKS: dict[str, Callable[[], Iterator[Attempt]]] = {
    "CPU-only Deployment sized to an H200 node, GPU toleration and pool": _whole_node_lighthouse_pods,
    "GPU Job that requests no GPU": _gpu_job_without_gpus(lambda s: None),
    "GPU Job that requests zero GPUs": functools.partial(_hostile_pods, _zero_gpus),
    "CPU Job tolerating the GPU taint": _cpu_job(lambda s: s.update(tolerations=[GPU_TOLERATION])),
    "CPU Job tolerating every taint": _cpu_job(lambda s: s.update(tolerations=[{"operator": "Exists"}])),
    "CPU Job selecting the accelerator": _cpu_job(
        lambda s: s.update(nodeSelector={contract_names.ACCELERATOR_LABEL: "nvidia-h200-141gb"})
    ),
    "CPU Job selecting a GPU node pool": _cpu_job(lambda s: s.update(nodeSelector={names.NODE_POOL_LABEL: GPU_POOL})),
    "CPU Job selecting a GPU fleet pool": _cpu_job(lambda s: s.update(nodeSelector={names.POOL_LABEL: GPU_POOL})),
    "CPU Job requiring a GPU node pool by affinity": _cpu_job(
        _node_term({"key": names.NODE_POOL_LABEL, "operator": "In", "values": ["cpu", GPU_POOL]})
    ),
    "CPU Job requiring any accelerator by affinity": _cpu_job(
        _node_term({"key": contract_names.ACCELERATOR_LABEL, "operator": "Exists"})
    ),
    "CPU Job preferring a GPU fleet pool": _cpu_job(
        _preferred({"key": names.POOL_LABEL, "operator": "In", "values": [GPU_POOL]})
    ),
    "RayCluster with an 8-GPU head": _ray_head("RayCluster", "research-dev", _gpu_head),
    "RayJob with an 8-GPU head": _ray_head("RayJob", "llama-70b-pretrain", _gpu_head),
    "RayCluster head requesting a GPU on the CPU pool": _ray_head("RayCluster", "research-dev", _head_gpus_only),
    "RayJob head tolerating the GPU taint": _ray_head(
        "RayJob", "sft-eval-sweep", lambda s: s.update(tolerations=[GPU_TOLERATION])
    ),
    "Job pinned to a node": _pinned(_job_spec),
    "RayCluster worker pinned to a node": _pinned(_worker_spec),
    "Deployment pinned to a node": _pinned(_deployment_spec),
    "pod created pinned to a node": _pinned_pod_by_controller,
}


# --- Labels: a pod's team is its namespace's ---


def _another_team(o: Obj) -> str:
    own = o["metadata"]["namespace"]
    return next(t for t in ("pretraining", "research") if names.team_namespace(t) != own)


def _other_team(target: Target) -> Callable[[], Iterator[Attempt]]:
    """An object whose labels (`target` picks the map) claim another team's."""

    def attempts() -> Iterator[Attempt]:
        o, labels = target()
        labels[names.TEAM_LABEL] = _another_team(o)
        yield Attempt(request(o), o)

    return attempts


def _job_labels() -> tuple[Obj, Obj]:
    job = gpu_job()
    return job, job["metadata"]["labels"]


def _job_template_labels() -> tuple[Obj, Obj]:
    job = gpu_job()
    return job, job["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {})


def _worker_labels() -> tuple[Obj, Obj]:
    cluster = _golden("RayCluster", "research-dev")
    return cluster, cluster["spec"]["workerGroupSpecs"][0]["template"]["metadata"]["labels"]


def _head_labels() -> tuple[Obj, Obj]:
    rayjob = _golden("RayJob", "llama-70b-pretrain")
    return rayjob, rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["metadata"]["labels"]


def _submitter_labels() -> tuple[Obj, Obj]:
    rayjob = _golden("RayJob", "llama-70b-pretrain")
    rayjob["spec"]["submitterPodTemplate"] = {
        "metadata": {"labels": {}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "submit", "image": "rayproject/ray:2.41.0"}]},
    }
    return rayjob, rayjob["spec"]["submitterPodTemplate"]["metadata"]["labels"]


def _deployment_template_labels() -> tuple[Obj, Obj]:
    deployment = lighthouse("Deployment")
    return deployment, deployment["spec"]["template"]["metadata"]["labels"]


def _pod_claiming_another_team() -> Iterator[Attempt]:
    job = gpu_job()
    job["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {})[names.TEAM_LABEL] = "pretraining"
    pod = _pod(job, job["spec"]["template"], "0")
    yield Attempt(request(pod, user=admission.JOB_CONTROLLER), pod)


def _pod_relabelled() -> Iterator[Attempt]:
    job = gpu_job()
    old = _pod(job, job["spec"]["template"], "0")
    new = copy.deepcopy(old)
    new["metadata"]["labels"][names.TEAM_LABEL] = "pretraining"
    yield Attempt(request(new, "UPDATE", user=TRAINER), new, old)


LABEL_ATTACKS: dict[str, Callable[[], Iterator[Attempt]]] = {
    "Job labelled as another team": _other_team(_job_labels),
    "Job's pod template labelled as another team": _other_team(_job_template_labels),
    "RayCluster worker template labelled as another team": _other_team(_worker_labels),
    "RayJob head template labelled as another team": _other_team(_head_labels),
    "RayJob submitter template labelled as another team": _other_team(_submitter_labels),
    "Deployment template labelled as another team": _other_team(_deployment_template_labels),
    "pod built with another team's label": _pod_claiming_another_team,
    "pod relabelled as another team": _pod_relabelled,
}

NODE_ATTACKS: dict[str, Callable[[], Iterator[Attempt]]] = {
    "agent patches another node's status": lambda: iter([_node_status("gke-b", AGENT, bound_to="gke-a")]),
    "agent without a node-bound token": lambda: iter([_node_status("gke-a", AGENT, bound_to=None)]),
    "agent patches another node": lambda: iter(
        [
            Attempt(
                Request(
                    "UPDATE",
                    "",
                    "v1",
                    "nodes",
                    "Node",
                    "",
                    "gke-b",
                    "",
                    AGENT,
                    extra={admission.NODE_NAME_EXTRA: ["gke-a"]},
                ),
                {},
                {},
            )
        ]
    ),
}


def _namespace(namespaces: dict[str, Obj], req: Request) -> Obj | None:
    if not req.namespace:
        return None
    return namespaces[req.namespace]


def _outcomes(policies: Policies, namespaces: dict[str, Obj], attempt: Attempt) -> list[Outcome]:
    return admit(policies, attempt.request, attempt.obj, attempt.old, _namespace(namespaces, attempt.request))


def _refused(policies: Policies, namespaces: dict[str, Obj], attempt: Attempt) -> list[Outcome]:
    outcomes = _outcomes(policies, namespaces, attempt)
    return [o for o in outcomes if o.denied and not o.error]


ALL_ATTACKS: dict[str, Callable[[], Iterator[Attempt]]] = {
    **{f"pod: {k}": functools.partial(_hostile_pods, e) for k, e in POD_ATTACKS.items()},
    **{f"pod: {k}": v for k, v in POD_REQUESTS.items()},
    **{f"queue: {k}": v for k, v in QUEUE_ATTACKS.items()},
    **{f"priority: {k}": v for k, v in PRIORITY_ATTACKS.items()},
    **{f"node: {k}": v for k, v in NODE_ATTACKS.items()},
    **{f"service: {k}": v for k, v in SERVICE_ATTACKS.items()},
    **{f"deployment: {k}": v for k, v in DEPLOYMENT_ATTACKS.items()},
    **{f"placement: {k}": v for k, v in PLACEMENT_ATTACKS.items()},
    **{f"labels: {k}": v for k, v in LABEL_ATTACKS.items()},
}


@pytest.mark.parametrize("case", sorted(ALL_ATTACKS))
def test_hostile_request_is_refused(
    case: str, cluster_policies: dict[str, Policies], cluster_namespaces: dict[str, dict[str, Obj]]
) -> None:
    for region, policies in cluster_policies.items():
        for attempt in ALL_ATTACKS[case]():
            refused = _refused(policies, cluster_namespaces[region], attempt)
            errors = [o for o in _outcomes(policies, cluster_namespaces[region], attempt) if o.error]
            assert refused, (
                f"{region}: {case} is admitted ({attempt.request.kind} by {attempt.request.username}); errors: {errors}"
            )
            assert all(o.message for o in refused)
            concerns = {admission.concern(o.policy) for o in refused}
            assert _expected_policy(case) in concerns, f"{region}: {case} refused by {refused}"


def _expected_policy(case: str) -> str:
    """The policy meant to refuse a case: a regression moving it elsewhere is worth knowing about."""
    if case == "pod: pod PriorityClass":
        return admission.PRIORITIES
    return {
        "pod": admission.POD_SECURITY,
        "queue": admission.QUEUES,
        "priority": admission.PRIORITIES,
        "service": admission.SERVICES,
        "deployment": admission.DEPLOYMENTS,
        "placement": admission.PLACEMENT,
        "labels": admission.LABELS,
    }.get(case.split(":", 1)[0], admission.AGENT_NODE)


def test_writable_host_mount_is_refused(
    cluster_policies: dict[str, Policies], cluster_namespaces: dict[str, dict[str, Obj]]
) -> None:
    """A pod that can write /home/kubernetes/bin/nvidia can replace the driver libraries the next tenant loads."""
    job = gpu_job()
    for container in _spec(job)["containers"]:
        for mount in container.get("volumeMounts", []):
            mount.pop("readOnly", None)
    for region, policies in cluster_policies.items():
        assert _refused(policies, cluster_namespaces[region], Attempt(request(job), job)), region


def _add_to_preflight(capability: str) -> PodEdit:
    return lambda s: s["initContainers"][0]["securityContext"]["capabilities"]["add"].append(capability)


def test_preflight_as_root_with_only_syslog_is_admitted_and_nothing_beside_it(
    cluster_policies: dict[str, Policies], cluster_namespaces: dict[str, dict[str, Obj]]
) -> None:
    """gkr's preflight init container as rendered (the golden): root, because containerd gives a non-root process
    none of the added capabilities (kubernetes/kubernetes#56374), with every capability dropped but SYSLOG. Its Job
    and pod are admitted; the same container adding NET_RAW (one root holds by default) is refused."""
    (init,) = _spec(gpu_job())["initContainers"]
    assert init["name"] == "preflight"
    assert (init["securityContext"]["runAsUser"], init["securityContext"]["runAsNonRoot"]) == (0, False)
    assert init["securityContext"]["capabilities"] == {
        "drop": ["ALL"],
        "add": list(contract_names.TEAM_CAPABILITIES),
    }
    for region, policies in cluster_policies.items():
        for attempt in _hostile_pods(lambda s: None):  # no edit: the Job and its pod as gkr renders them
            assert not _refused(policies, cluster_namespaces[region], attempt), region
        for attempt in _hostile_pods(_add_to_preflight("NET_RAW")):
            refused = _refused(policies, cluster_namespaces[region], attempt)
            assert {admission.concern(o.policy) for o in refused} == {admission.POD_SECURITY}, region


@pytest.mark.parametrize("name", [name for name, _, _ in legitimate()])
def test_gkr_golden_and_its_pods_are_admitted(
    name: str, cluster_policies: dict[str, Policies], cluster_namespaces: dict[str, dict[str, Obj]]
) -> None:
    _, req, o = next(x for x in legitimate() if x[0] == name)
    for region, policies in cluster_policies.items():
        outcomes = admit(policies, req, o, None, cluster_namespaces[region][req.namespace])
        assert _meant_for(policies, req) <= {x.policy for x in outcomes}, (
            f"{region}: {name} is not checked by every team policy"
        )
        assert not [x for x in outcomes if x.denied], f"{region}: {name} refused: {outcomes}"


def _meant_for(policies: Policies, req: Request) -> set[str]:
    """The team policies whose rules name the request's resource."""
    return {
        name
        for name, (policy, _) in policies.items()
        if name not in CLUSTER_WIDE
        and any(
            req.group in r["apiGroups"] and req.resource in r["resources"]
            for r in policy["spec"]["matchConstraints"]["resourceRules"]
        )
    }


def test_legitimate_updates_and_node_patches_are_admitted(
    cluster_policies: dict[str, Policies], cluster_namespaces: dict[str, dict[str, Obj]]
) -> None:
    job = gpu_job()
    pod = _pod(job, job["spec"]["template"], "0")
    pod["spec"]["nodeName"] = "gke-a"  # scheduled: the scheduler's binding wrote it, and it stays on every update
    relabelled = copy.deepcopy(pod)
    relabelled["metadata"]["labels"]["kueue.x-k8s.io/tas"] = "true"  # a controller patches a pod Kueue never managed
    debugged = copy.deepcopy(pod)  # `kubectl debug`: an ephemeral container reading the driver volume
    mount = {"name": "nvidia", "mountPath": "/nvidia", "readOnly": True}
    debugged["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": "busybox", "volumeMounts": [mount]}]
    allowed = [
        _update(job, _relabel(job, priority="high")),  # research may raise to its ceiling
        Attempt(
            request(relabelled, "UPDATE", user=admission.KUEUE_CONTROLLER),
            relabelled,
            pod,
        ),
        Attempt(request(debugged, "UPDATE", sub_resource="ephemeralcontainers"), debugged, pod),
        _node_status("gke-a", AGENT, bound_to="gke-a"),
        _node_status("gke-b", WARDEN, bound_to=None),  # the service repairs any node
        _node_status("gke-b", "system:node:gke-b", bound_to=None),  # kubelets: the NodeRestriction plugin's job
    ]
    for region, policies in cluster_policies.items():
        for attempt in allowed:
            outcomes = _outcomes(policies, cluster_namespaces[region], attempt)
            assert not [o for o in outcomes if o.denied], f"{region}: {attempt.request} refused: {outcomes}"


def test_every_expression_compiles(cluster_policies: dict[str, Policies]) -> None:
    found = 0
    for policies in cluster_policies.values():
        for policy, _ in policies.values():
            for expression in expressions(policy):
                cel.compile(expression)
                found += 1
    assert found


def test_expected_policies_are_deployed(cluster_policies: dict[str, Policies]) -> None:
    per_kinds = {admission.POD_SECURITY, admission.PRIORITIES, admission.PLACEMENT, admission.LABELS}
    for region, policies in cluster_policies.items():
        # Those reading pod templates come once per workload layout (cel.Kinds), the others once.
        for name in per_kinds:
            assert {n for n in policies if admission.concern(n) == name} == {
                f"{name}-{kinds.name}" for kinds in WORKLOAD_KINDS
            }, region
        assert {admission.concern(n) for n in policies} == {
            admission.POD_SECURITY,
            admission.QUEUES,
            admission.PRIORITIES,
            admission.SERVICES,
            admission.DEPLOYMENTS,
            admission.PLACEMENT,
            admission.LABELS,
            admission.AGENT_NODE,
            operators.SYNC_GUARD,
        }, region
        for name, (policy, bindings) in policies.items():
            assert policy["spec"]["failurePolicy"] == "Fail"
            assert len(bindings) == 1, f"{region}: {name} has {len(bindings)} bindings"
            assert bindings[0]["spec"]["validationActions"] == ["Deny"]


def test_team_namespaces_are_selected_by_label(
    fleet: Fleet, cluster_policies: dict[str, Policies], cluster_namespaces: dict[str, dict[str, Obj]]
) -> None:
    selector = {"matchExpressions": [{"key": names.TEAM_LABEL, "operator": "Exists"}]}
    teams = {names.team_namespace(t.name): t.name for t in fleet.teams}
    for region, policies in cluster_policies.items():
        for name, (policy, bindings) in policies.items():
            if name in CLUSTER_WIDE:
                continue
            assert bindings[0]["spec"]["matchResources"]["namespaceSelector"] == selector
            assert policy["spec"]["matchConstraints"]["namespaceSelector"] == selector
        labelled = {
            n for n, o in cluster_namespaces[region].items() if names.TEAM_LABEL in o["metadata"].get("labels", {})
        }
        assert labelled == set(teams), f"{region}: namespaces with {names.TEAM_LABEL}: {sorted(labelled)}"
        for namespace, team in teams.items():
            labels = cluster_namespaces[region][namespace]["metadata"]["labels"]
            assert labels[names.TEAM_LABEL] == team
            assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
            assert labels["pod-security.kubernetes.io/audit"] == "baseline"


def test_platform_namespaces_have_the_least_pod_security_level(cluster_namespaces: dict[str, dict[str, Obj]]) -> None:
    expected = {
        names.WARDEN_NAMESPACE: "privileged",
        names.SWEEP_NAMESPACE: "privileged",  # the deep check mounts the host's NVIDIA driver
        "meridian-images": "restricted",
        REGISTRY_NAMESPACE: "restricted",
    }
    for region, namespaces in cluster_namespaces.items():
        for namespace, level in expected.items():
            assert namespaces[namespace]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == level, region


def _pod_templates(o: Obj) -> list[Obj]:
    spec = o.get("spec") or {}
    template = spec.get("template") if isinstance(spec, dict) else None
    return [template] if isinstance(template, dict) and "spec" in template else []


def test_platform_pods_in_team_namespaces_are_admitted(
    trees: dict[str, tuple[ClusterTree, list[Finding]]],
    cluster_policies: dict[str, Policies],
    cluster_namespaces: dict[str, dict[str, Obj]],
) -> None:
    """Pods of the platform's own workloads: admitted where the policies apply, untouched elsewhere."""
    for region, (tree, _) in trees.items():
        for _, o in tree.objects():
            for template in _pod_templates(o):
                namespace = o["metadata"].get("namespace", "")
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "p", "namespace": namespace, "labels": {}},
                    "spec": template["spec"],
                }
                controller = f"system:serviceaccount:kube-system:{o['kind'].lower()}-controller"
                # Namespaces GKE creates (kube-system) carry no labels of ours.
                ns = cluster_namespaces[region].get(namespace, {"metadata": {"name": namespace, "labels": {}}})
                outcomes = admit(cluster_policies[region], request(pod, user=controller), pod, None, ns)
                team_namespace = names.TEAM_LABEL in ns["metadata"].get("labels", {})
                if not team_namespace:
                    assert not outcomes, f"{region}: team policies apply to {namespace}/{o['metadata']['name']}"
                assert not [x for x in outcomes if x.denied], (
                    f"{region}: {o['kind']} {o['metadata']['name']} refused: {outcomes}"
                )


def test_policies_are_valid_kubernetes_objects(
    fleet: Fleet, crds: CrdSchemas, cluster_policies: dict[str, Policies]
) -> None:
    for policies in cluster_policies.values():
        for policy, bindings in policies.values():
            for o in [policy, *bindings]:
                assert validate_object(o, fleet.versions.kubernetes, crds) == [], o["metadata"]["name"]
