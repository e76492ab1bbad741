"""What a job makes in its team's namespace, counted as the namespace's ResourceQuota counts it.

The team namespace's object counts (pods, Services, Secrets, ConfigMaps, PVCs) are fleet's
(fleet.objectquota), published in the registry (`Team.objects`); the API server refuses whatever a job
makes beyond them, so a job over one can never run whole. `over_quota` says so in the summary, one line,
before anything is applied. It compares a job with the namespace's whole quota: what the team already
runs there is the cluster's to count (`kubectl describe resourcequota team-limits`).

Besides gkr's own objects, KubeRay makes a head Service for each RayCluster (a RayJob's too;
`raycluster_controller.go` `reconcileHeadService`), one headless Service when a worker group spans
several hosts (`reconcileHeadlessService`, `NumOfHosts > 1`), and in K8sJobMode a submitter Job of one
pod (`rayjob_controller.go` `createK8sJobIfNeed`), all at KubeRay v1.7.0; the kubelet makes nothing
counted here, and the ephemeral-volume controller one PVC per generic ephemeral volume of each pod.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from contract.words import count as count_of

# ResourceQuota name -> how the summary names it (fleet.objectquota's names; Events are not a job's own).
COUNTED = {
    "pods": "pod",
    "services": "Service",
    "services.loadbalancers": "load balancer",
    "services.nodeports": "node port",
    "secrets": "Secret",
    "configmaps": "ConfigMap",
    "persistentvolumeclaims": "PVC",
    "count/jobs.batch": "Job",
    "count/rayjobs.ray.io": "RayJob",
    "count/rayclusters.ray.io": "RayCluster",
    "count/deployments.apps": "Deployment",
}
_PLAIN = {
    "Secret": "secrets",
    "ConfigMap": "configmaps",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "Job": "count/jobs.batch",
    "RayJob": "count/rayjobs.ray.io",
    "RayCluster": "count/rayclusters.ray.io",
    "Deployment": "count/deployments.apps",
}


def _pods(template: Any, pods: int, found: Counter[str]) -> None:
    """`pods` pods of a pod template: each, and the PVC of each generic ephemeral volume it declares."""
    spec = (template or {}).get("spec") or {}
    ephemeral = sum(1 for v in spec.get("volumes") or [] if isinstance(v, dict) and "ephemeral" in v)
    found["pods"] += pods
    found["persistentvolumeclaims"] += pods * ephemeral


def _ray(spec: dict[str, Any], found: Counter[str]) -> None:
    """A RayCluster's spec: its head and workers, and the Services KubeRay makes for it (module doc)."""
    _pods(spec.get("headGroupSpec", {}).get("template"), 1, found)
    groups = spec.get("workerGroupSpecs") or []
    for group in groups:
        _pods(group.get("template"), int(group.get("replicas", 0)) * int(group.get("numOfHosts", 1)), found)
    found["services"] += 1 + any(int(g.get("numOfHosts", 1)) > 1 for g in groups)


def _service(spec: dict[str, Any], found: Counter[str]) -> None:
    found["services"] += 1
    if spec.get("type") == "LoadBalancer":
        found["services.loadbalancers"] += 1
        if spec.get("allocateLoadBalancerNodePorts", True):
            found["services.nodeports"] += len(spec.get("ports") or [])


def made(objects: list[dict[str, Any]]) -> dict[str, int]:
    """ResourceQuota name -> how many of it the objects make in their namespace, KubeRay's included."""
    found: Counter[str] = Counter()
    for o in objects:
        kind, spec = o.get("kind"), o.get("spec") or {}
        found[_PLAIN.get(str(kind), "")] += 1
        if kind == "Service":
            _service(spec, found)
        elif kind == "Job":
            _pods(spec.get("template"), int(spec.get("parallelism", 1)), found)
        elif kind == "Deployment":
            _pods(spec.get("template"), int(spec.get("replicas", 1)), found)
        elif kind == "RayCluster":
            _ray(spec, found)
        elif kind == "RayJob":
            _ray(spec.get("rayClusterSpec") or {}, found)
            found["count/rayclusters.ray.io"] += 1  # KubeRay's RayCluster of the RayJob
            submitter = spec.get("submissionMode", "K8sJobMode") == "K8sJobMode"
            found["pods"] += submitter
            found["count/jobs.batch"] += submitter
    return {key: found[key] for key in COUNTED if found[key]}  # ("" counted the kinds no quota counts)


def over_quota(objects: list[dict[str, Any]], quota: dict[str, int], namespace: str, region: str) -> str | None:
    """One line naming each count the objects take past the namespace's quota, or None (also when the
    registry predates object quotas: `quota` empty)."""
    wants = made(objects)
    over = [
        f"{count_of(n, COUNTED[key])} (quota {quota[key]:,})"
        for key, n in wants.items()
        if key in quota and n > quota[key]
    ]
    if not over:
        return None
    return (
        f"the job makes {', '.join(over)} in {namespace} in {region}: the API server refuses what is past "
        "the namespace's ResourceQuota team-limits, so the job never runs whole; make it smaller, or ask "
        "the fleet owners to raise teams[].objects"
    )
