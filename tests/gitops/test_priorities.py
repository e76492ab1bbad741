"""Pods with a system-* PriorityClass outside kube-system are admitted only with a quota that names the class.

GKE (like Kubernetes with `limitedResources` for PriorityClass) admits
system-node-critical and system-cluster-critical pods outside kube-system only
if the namespace has a ResourceQuota whose scopeSelector names that class
(REFERENCE.md; https://kubernetes.io/docs/concepts/policy/resource-quotas/#limit-priority-class-consumption-by-default).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from fleet.capacity import cpu_pool_capacity, region_capacity
from fleet.gitops.check import ClusterTree, check_tree
from fleet.gitops.validate import CrdSchemas, Finding
from fleet.gitops.warden import CRITICAL_HEADROOM
from fleet.model import Fleet

Trees = dict[str, tuple[ClusterTree, list[Finding]]]
REGIONS = ["us-central1", "us-east4", "europe-west1"]
POD_KINDS = {"Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job", "Pod"}


def _pod_spec(o: dict[str, Any]) -> dict[str, Any]:
    if o["kind"] == "Pod":
        return dict(o.get("spec", {}))
    if o["kind"] == "CronJob":
        return dict(o["spec"]["jobTemplate"]["spec"]["template"]["spec"])
    return dict(o["spec"]["template"]["spec"])


def _quota_classes(objects: list[dict[str, Any]]) -> dict[str, set[str]]:
    """namespace -> PriorityClasses named by its ResourceQuotas' scopeSelectors."""
    found: dict[str, set[str]] = {}
    for o in objects:
        if o["kind"] != "ResourceQuota":
            continue
        for expression in o["spec"].get("scopeSelector", {}).get("matchExpressions", []):
            if expression["scopeName"] == "PriorityClass" and expression["operator"] == "In":
                found.setdefault(o["metadata"]["namespace"], set()).update(expression["values"])
    return found


@pytest.mark.parametrize("region", REGIONS)
def test_system_priority_pods_outside_kube_system_have_a_quota_naming_the_class(trees: Trees, region: str) -> None:
    tree, _ = trees[region]
    objects = [o for _, o in tree.objects()]
    quotas = _quota_classes(objects)
    critical = [
        (o["metadata"].get("namespace"), o["kind"], o["metadata"]["name"], _pod_spec(o)["priorityClassName"])
        for o in objects
        if o["kind"] in POD_KINDS | {"CronJob"} and str(_pod_spec(o).get("priorityClassName", "")).startswith("system-")
    ]
    assert ("warden", "DaemonSet", "warden-agent", "system-node-critical") in critical
    for namespace, kind, name, priority in critical:
        if namespace != "kube-system":
            assert priority in quotas.get(namespace, set()), f"{kind} {namespace}/{name}: no quota for {priority}"


def test_the_critical_pod_quota_allows_a_pod_per_node(fleet: Fleet, trees: Trees) -> None:
    for region in fleet.regions:
        tree, _ = trees[region.name]
        (quota,) = [o for o in tree.apps["warden"] if o["kind"] == "ResourceQuota" and "scopeSelector" in o["spec"]]
        nodes = region_capacity(region).nodes + sum(cpu_pool_capacity(p).nodes for p in region.cpu_pools)
        assert quota["spec"]["hard"] == {"pods": str(nodes + CRITICAL_HEADROOM)}


def test_cross_check_reports_a_critical_pod_without_its_quota(fleet: Fleet, crds: CrdSchemas, trees: Trees) -> None:
    tree, _ = trees["us-central1"]
    broken = copy.deepcopy(tree)
    broken.apps["warden"] = [o for o in broken.apps["warden"] if o["kind"] != "ResourceQuota"]
    messages = {f.message for f in check_tree(fleet, fleet.regions[0], broken, crds)}
    assert (
        "priority class system-node-critical needs a ResourceQuota in warden whose scopeSelector names it" in messages
    )
