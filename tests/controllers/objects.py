"""Small hand-made Kubernetes objects for the controllers' rules: one cluster's Kueue objects and jobs."""

from __future__ import annotations

from typing import Any

import yaml

Obj = dict[str, Any]
API = "kueue.x-k8s.io/v1beta2"
POOL = "cloud.google.com/gke-nodepool"
GKE_LEVELS = (
    "cloud.google.com/gce-topology-block",
    "cloud.google.com/gce-topology-subblock",
    "cloud.google.com/gce-topology-host",
    "kubernetes.io/hostname",
)
TEAM_NS = "team-a"
SELECTOR = {"matchExpressions": [{"key": "meridian.dev/team", "operator": "Exists"}]}
GATES = {
    "TopologyAwareScheduling": True,
    "TASFailedNodeReplacement": True,
    "TASReplaceNodeOnPodTermination": True,
    "TASReplaceNodeDueToNotReadyOverFixedTime": False,
    "TASFailedNodeReplacementFailFast": False,
}


def _obj(kind: str, name: str, namespace: str | None = None, api: str = API, **fields: Any) -> Obj:
    meta: Obj = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": api, "kind": kind, "metadata": meta, **fields}


def topology(name: str, *levels: str) -> Obj:
    return _obj("Topology", name, spec={"levels": [{"nodeLabel": level} for level in levels]})


def flavor(name: str, topology_name: str | None = None) -> Obj:
    spec: Obj = {"nodeLabels": {POOL: name}}
    if topology_name:
        spec["topologyName"] = topology_name
    return _obj("ResourceFlavor", name, spec=spec)


def quota(name: str, gpu: int, cpu: int, memory_gi: int, borrowing: tuple[int, int, int] | None = None) -> Obj:
    resources = []
    for i, (resource, amount) in enumerate((("nvidia.com/gpu", gpu), ("cpu", cpu), ("memory", f"{memory_gi}Gi"))):
        entry: Obj = {"name": resource, "nominalQuota": amount}
        if borrowing is not None:
            entry["borrowingLimit"] = borrowing[i] if resource != "memory" else f"{borrowing[i]}Gi"
        resources.append(entry)
    return {"name": name, "resources": resources}


def cluster_queue(name: str, *flavors: Obj, cohort: str | None = "c", namespace: str = TEAM_NS) -> Obj:
    spec: Obj = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "resourceGroups": [{"coveredResources": ["nvidia.com/gpu", "cpu", "memory"], "flavors": list(flavors)}],
    }
    if cohort:
        spec["cohortName"] = cohort
    return _obj("ClusterQueue", name, spec=spec)


def local_queue(name: str, queue: str, namespace: str = TEAM_NS) -> Obj:
    return _obj("LocalQueue", name, namespace, spec={"clusterQueue": queue})


def namespace(name: str = TEAM_NS, team: bool = True) -> Obj:
    labels = {"meridian.dev/team": "a"} if team else {}
    return _obj("Namespace", name, api="v1", metadata={"name": name, "labels": labels})


def values(gates: dict[str, bool] | None = None, selector: Obj | None = None) -> Obj:
    """The Kueue chart's values with a manager Configuration (featureGates: GATES unless given)."""
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "manageJobsWithoutQueueName": True,
        "managedJobsNamespaceSelector": selector or SELECTOR,
        "featureGates": GATES if gates is None else gates,
    }
    return {"managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(config)}}


def pod(
    gpus: int = 8,
    cpu: str = "200",
    memory: str = "2000Gi",
    selector: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> Obj:
    """A pod template: one container with these requests (and GPUs as limits too)."""
    requests: Obj = {"cpu": cpu, "memory": memory}
    limits: Obj = {}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
        limits["nvidia.com/gpu"] = str(gpus)
    spec: Obj = {
        "containers": [{"name": "main", "image": "trainer", "resources": {"requests": requests, "limits": limits}}]
    }
    if selector:
        spec["nodeSelector"] = selector
    return {"metadata": {"annotations": annotations or {}}, "spec": spec}


def job(template: Obj, pods: int = 1, queue: str | None = "q", namespace: str = TEAM_NS, name: str = "j") -> Obj:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return _obj(
        "Job",
        name,
        namespace,
        api="batch/v1",
        metadata={"name": name, "namespace": namespace, "labels": labels},
        spec={"parallelism": pods, "completions": pods, "suspend": True, "template": template},
    )


def rayjob(worker: Obj, replicas: int = 2, queue: str = "q", **spec: Any) -> Obj:
    head = pod(gpus=0, cpu="8", memory="32Gi", selector={POOL: "cpu"})
    body: Obj = {
        "shutdownAfterJobFinishes": True,
        "rayClusterSpec": {
            "headGroupSpec": {"template": head},
            "workerGroupSpecs": [{"groupName": "workers", "replicas": replicas, "template": worker}],
        },
        **spec,
    }
    meta = {"name": "rj", "namespace": TEAM_NS, "labels": {"kueue.x-k8s.io/queue-name": queue}}
    return _obj("RayJob", "rj", api="ray.io/v1", metadata=meta, spec=body)
