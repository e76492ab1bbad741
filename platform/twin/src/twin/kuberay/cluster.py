"""A RayCluster read, checked and turned into the pods and head Service KubeRay v1.7.0 creates (pure).

Read at 59d663aeec13760646da3db9c1cf8cfe883e30b7: raycluster_controller.go (reconcilePods: one head,
`GetWorkerGroupDesiredReplicas` workers per group, RayMultiHostIndexing's replica indices 0..n-1;
reconcileHeadService), common/service.go (BuildServiceForHeadPod, getServicePorts), utils/util.go
(GenerateHeadServiceName, GenerateFQDNServiceName, GetWorkerGroupDesiredReplicas) and
utils/validation.go (ValidateRayClusterMetadata, ValidateRayClusterSpec: the checks that decide pods).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from contract.names import RAYCLUSTER_NAME_MAX, RAYJOB_NAME_MAX, is_dns1035_label
from twin.kuberay import pod, start
from twin.kuberay.spec import Where

CLUSTER_DOMAIN = "cluster.local"  # utils.GetClusterDomainName without CLUSTER_DOMAIN set
CREATOR_LABEL = "ray.io/originated-from-crd"
MAX_PODS = 1000  # the largest shipped job has 129 pods; a hostile replicas count must not build millions
_DEFAULT_PORTS = {  # service.go getDefaultPorts
    "client": start.DEFAULT_CLIENT_PORT,
    "gcs-server": start.DEFAULT_GCS_PORT,
    "dashboard": start.DEFAULT_DASHBOARD_PORT,
    "metrics": start.DEFAULT_METRICS_PORT,
    "serve": start.DEFAULT_SERVING_PORT,
}


@dataclass(frozen=True)
class ClusterPods:
    """Every pod KubeRay creates for one RayCluster, and how its head Service's names resolve.

    `services` maps each DNS name of a Service KubeRay creates (short, `<svc>.<namespace>`, and the
    FQDN `<svc>.<namespace>.svc.cluster.local`) to the one pod behind it, the head: the head Service
    is headless with a single endpoint, so a host entry per name is what cluster DNS would answer.
    """

    name: str
    namespace: str
    head: dict[str, Any]
    workers: Mapping[str, tuple[dict[str, Any], ...]]  # group name -> its pods, replica 0 first
    head_service: str  # the FQDN workers dial (FQ_RAY_IP)
    service_ports: Mapping[str, int]  # the head Service's ports by name (gcs-server, dashboard, client...)
    services: Mapping[str, str]

    @property
    def pods(self) -> tuple[dict[str, Any], ...]:
        """The head, then every worker group's pods in the spec's order."""
        return (self.head, *(p for group in self.workers.values() for p in group))


def service_names(service: str, namespace: str) -> tuple[str, ...]:
    """The names a pod in the cluster resolves for a Service: short, with namespace, FQDN."""
    return (service, f"{service}.{namespace}", f"{service}.{namespace}.svc.{CLUSTER_DOMAIN}")


def cluster_pods(raycluster: dict[str, Any], namespace: str, owner: Where | None = None) -> ClusterPods:
    """The head pod and every worker pod KubeRay v1.7.0 builds for `raycluster`, applied to `namespace`.

    Raises Rejected for what the API server or KubeRay refuses, Unsupported for what the twin does not
    model; both name the field (in `owner`'s terms when the cluster is one a RayJob describes).
    """
    where, name, meta, spec = read_object(raycluster, namespace, "RayCluster")
    where = owner or where
    _refuse(where, meta, spec)
    head_group = spec.get("headGroupSpec")
    if head_group is None:
        raise where.rejected("spec.headGroupSpec", "is missing", "add the head group")
    head_group = _group(where, head_group, "spec.headGroupSpec", "Head")
    listed = where.items(spec.get("workerGroupSpecs"), "spec.workerGroupSpecs")
    groups = [_worker_group(where, g, f"spec.workerGroupSpecs[{i}]") for i, g in enumerate(listed)]
    if sum(_replicas(g) for g in groups) >= MAX_PODS:
        what = f"asks for more than {MAX_PODS - 1} worker pods; one machine cannot stand in for them"
        raise where.unsupported("spec.workerGroupSpecs", what, "lower replicas to run it in the twin")
    names = [g["groupName"] for g in groups]
    if len(set(names)) < len(names):
        what = "two worker groups share a groupName; KubeRay would count their pods as one group's"
        raise where.rejected("spec.workerGroupSpecs", what, "give each group its own name")
    creator = _creator(where, meta)
    service = _head_service_name(where, name, head_group)
    cluster = pod.Cluster(
        name=name,
        namespace=namespace,
        creator=creator,
        fqdn=service_names(service, namespace)[2],
        gcs_port=start.head_port(head_group["rayStartParams"]),
        ray_version=where.text(spec.get("rayVersion"), "spec.rayVersion"),
        overwrite_cmd=str(meta["annotations"].get(pod.OVERWRITE_CMD, "")).lower() == "true",
    )
    head = pod.head_pod(cluster, head_group, dict(head_group["rayStartParams"]))
    workers = {
        g["groupName"]: tuple(pod.worker_pod(cluster, g, dict(g["rayStartParams"]), i) for i in range(_replicas(g)))
        for g in groups
    }
    return ClusterPods(
        name=name,
        namespace=namespace,
        head=head,
        workers=MappingProxyType(workers),
        head_service=cluster.fqdn,
        service_ports=MappingProxyType(service_ports(head_group)),
        services=MappingProxyType(dict.fromkeys(service_names(service, namespace), head["metadata"]["name"])),
    )


def read_object(obj: object, namespace: str, kind: str) -> tuple[Where, str, dict[str, Any], dict[str, Any]]:
    """The object's name, metadata (labels, annotations read as string maps) and spec; the name checked."""
    where = Where(kind, namespace, "?")
    found = where.mapping(obj, "(document)")
    if found.get("kind", kind) != kind:
        raise where.rejected("kind", f"is {found.get('kind')!r}, not {kind}", f"pass a {kind}")
    meta = where.mapping(found.get("metadata"), "metadata")
    name = where.text(meta.get("name"), "metadata.name")
    where = Where(kind, namespace, name or "?")
    if meta.get("namespace") not in (None, namespace):
        what = f"is {meta.get('namespace')!r} but the object is applied to namespace {namespace!r}"
        raise where.rejected("metadata.namespace", what, "drop it or apply it to that namespace")
    limit = RAYCLUSTER_NAME_MAX if kind == "RayCluster" else RAYJOB_NAME_MAX
    if not is_dns1035_label(name) or len(name) > limit:
        what = f"{name!r} is not a DNS-1035 label of at most {limit} characters"
        raise where.rejected("metadata.name", what, "use lowercase letters, digits and '-', starting with a letter")
    labels = where.strings(meta.get("labels"), "metadata.labels")
    annotations = where.strings(meta.get("annotations"), "metadata.annotations")
    return where, name, {**meta, "labels": labels, "annotations": annotations}, where.mapping(found.get("spec"), "spec")


def _refuse(where: Where, meta: dict[str, Any], spec: dict[str, Any]) -> None:
    """What KubeRay does with these fields needs more than pods here: a controller, Redis, a Secret."""
    annotations = meta["annotations"]
    if where.flag(spec.get("enableInTreeAutoscaling"), "spec.enableInTreeAutoscaling"):
        fix = "the twin runs fixed replicas: set it false (gkr's jobs do)"
        raise where.unsupported("spec.enableInTreeAutoscaling", "the autoscaler sidecar needs the Kubernetes API", fix)
    if spec.get("gcsFaultToleranceOptions") is not None or annotations.get("ray.io/ft-enabled", "").lower() == "true":
        what = "GCS fault tolerance needs an external Redis (or the alpha RocksDB volume)"
        raise where.unsupported("spec.gcsFaultToleranceOptions", what, "drop it to run in the twin")
    if where.mapping(spec.get("authOptions"), "spec.authOptions").get("mode") == "token":
        what = "token authentication reads a Secret the operator generates"
        raise where.unsupported("spec.authOptions", what, "drop it to run in the twin")
    gates = {
        "tlsOptions": "RayClusterMTLS",
        "networkPolicy": "RayClusterNetworkPolicy",
        "historyServerOptions": "RayClusterHistoryServer",
    }
    for field, gate in gates.items():
        if spec.get(field) is not None:
            what = f"needs the {gate} feature gate, off in the Helm chart the fleet installs"
            raise where.rejected(f"spec.{field}", what, "drop it")
    if where.flag(spec.get("suspend"), "spec.suspend"):
        what = "KubeRay keeps a suspended cluster without pods"
        raise where.unsupported("spec.suspend", what, "set it false (Kueue does on admission) to run it")
    if spec.get("managedBy") not in (None, "ray.io/kuberay-operator"):
        what = f"{spec.get('managedBy')!r} builds this cluster's pods, not KubeRay"
        raise where.unsupported("spec.managedBy", what, "drop it to run in the twin")
    if annotations.get("ray.io/enable-serve-service") == "true":
        what = "the serve Service balances over many pods; the twin maps a name to one pod"
        raise where.unsupported("metadata.annotations.ray.io/enable-serve-service", what, "drop it")


def _creator(where: Where, meta: dict[str, Any]) -> str:
    """getCreatorCRDType: RayJob's clusters are labelled by the RayJob controller; anything else is a RayCluster."""
    creator = meta["labels"].get(CREATOR_LABEL, "RayCluster")
    if creator == "RayService":
        what = "RayService clusters get serve probes and labels"
        raise where.unsupported(f"metadata.labels.{CREATOR_LABEL}", what, "the twin runs RayClusters and RayJobs")
    return creator if creator == "RayJob" else "RayCluster"


def _group(where: Where, obj: object, path: str, label: str) -> dict[str, Any]:
    """A head or worker group: its template's Ray container readable, rayStartParams a string map."""
    group = dict(where.mapping(obj, path))
    template = where.mapping(group.get("template"), f"{path}.template")
    spec = where.mapping(template.get("spec"), f"{path}.template.spec")
    containers = where.items(spec.get("containers"), f"{path}.template.spec.containers")
    if not containers:
        what = "has no container"
        raise where.rejected(f"{path}.template.spec.containers", what, "the Ray container must come first")
    _container(where, containers[0], f"{path}.template.spec.containers[0]")
    for i, init in enumerate(where.items(spec.get("initContainers"), f"{path}.template.spec.initContainers")):
        where.items(init.get("env"), f"{path}.template.spec.initContainers[{i}].env")
    where.items(spec.get("volumes"), f"{path}.template.spec.volumes")
    params = where.strings(group.get("rayStartParams"), f"{path}.rayStartParams")
    resources = where.strings(group.get("resources"), f"{path}.resources")
    labels = where.strings(group.get("labels"), f"{path}.labels")
    if resources and any(params.get(k) for k in ("num-cpus", "num-gpus", "memory", "resources")):
        what = f"resource fields are set in both rayStartParams and resources for the {label} group"
        raise where.rejected(f"{path}.resources", what, "use only one")
    if "labels" in params:
        raise where.rejected(f"{path}.rayStartParams.labels", "is not supported", "use the group's top-level labels")
    template_meta = where.mapping(template.get("metadata"), f"{path}.template.metadata")
    for field in ("labels", "annotations"):
        where.strings(template_meta.get(field), f"{path}.template.metadata.{field}")
    return {**group, "rayStartParams": params, "resources": resources, "labels": labels}


def _container(where: Where, container: dict[str, Any], path: str) -> None:
    """The Ray container's fields KubeRay reads or extends, with the types the Pod schema gives them."""
    for field in ("command", "args"):
        value = container.get(field)
        if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
            raise where.rejected(f"{path}.{field}", "is not a list of strings", "write one string per argument")
    for field in ("env", "ports", "volumeMounts"):
        where.items(container.get(field), f"{path}.{field}")
    resources = where.mapping(container.get("resources"), f"{path}.resources")
    for kind in ("limits", "requests"):
        where.quantities(resources, f"{path}.resources", kind)
    for i, port in enumerate(container.get("ports") or []):
        if where.integer(port.get("containerPort"), f"{path}.ports[{i}].containerPort") is None:
            raise where.rejected(f"{path}.ports[{i}].containerPort", "is missing", "give the port's number")
    for i, env in enumerate(container.get("env") or []):
        where.text(env.get("name"), f"{path}.env[{i}].name")


def _worker_group(where: Where, obj: object, path: str) -> dict[str, Any]:
    group = _group(where, obj, path, "worker")
    name = where.text(group.get("groupName"), f"{path}.groupName")
    if not name:
        raise where.rejected(f"{path}.groupName", "is missing", "name the group")
    counts = {k: where.integer(group.get(k), f"{path}.{k}") for k in ("replicas", "minReplicas", "maxReplicas")}
    low, high = counts["minReplicas"], counts["maxReplicas"]
    if low is None or high is None:
        what = f"worker group {name} must set both minReplicas and maxReplicas when autoscaling is disabled"
        raise where.rejected(path, what, "set both")
    if low < 0 or high < 0 or low > high:
        raise where.rejected(path, f"worker group {name} has minReplicas {low} and maxReplicas {high}", "fix them")
    hosts = where.integer(group.get("numOfHosts"), f"{path}.numOfHosts", 1)
    if hosts is not None and hosts > 1:
        what = "multi-host replicas (TPU slices) get a headless worker Service and replica group names"
        raise where.unsupported(f"{path}.numOfHosts", what, "use numOfHosts: 1")
    suspended = where.flag(group.get("suspend"), f"{path}.suspend")
    return {**group, **counts, "groupName": name, "numOfHosts": hosts, "suspend": suspended}


def _replicas(group: dict[str, Any]) -> int:
    """GetWorkerGroupDesiredReplicas: replicas within [minReplicas, maxReplicas], times numOfHosts; 0 suspended."""
    if group["suspend"]:
        return 0
    low, high, wanted = group["minReplicas"], group["maxReplicas"], group["replicas"]
    count = low if wanted is None or wanted < low else min(wanted, high)
    return int(count * group["numOfHosts"])


def _head_service_name(where: Where, cluster: str, head_group: dict[str, Any]) -> str:
    """GenerateHeadServiceName for a RayCluster: headService.metadata.name, else `<cluster>-head-svc`."""
    custom = where.mapping(head_group.get("headService"), "spec.headGroupSpec.headService")
    meta = where.mapping(custom.get("metadata"), "spec.headGroupSpec.headService.metadata")
    return where.text(meta.get("name"), "spec.headGroupSpec.headService.metadata.name") or f"{cluster}-head-svc"


def service_ports(head_group: dict[str, Any]) -> dict[str, int]:
    """getServicePorts: the head template's Ray container ports (unnamed ones as `<n>-port`), else the
    defaults (client 10001, gcs-server 6379, dashboard 8265, metrics 8080, serve 8000); metrics always."""
    ray = head_group["template"]["spec"]["containers"][0]
    ports = {p.get("name") or f"{p.get('containerPort')}-port": p.get("containerPort") for p in ray.get("ports") or []}
    found = {k: int(v) for k, v in ports.items() if v is not None} or dict(_DEFAULT_PORTS)
    found.setdefault("metrics", start.DEFAULT_METRICS_PORT)
    return dict(sorted(found.items()))
