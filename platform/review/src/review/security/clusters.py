"""One cluster's objects, before and after: each object's findings.

The rules that read what they know (pods, RBAC, admission, NetworkPolicies, Pod Security, quotas against the
fleet plan) come first; then whatever else changed that the review does not know to be harmless
(objects.py), in the same line: one line per object.
"""

from __future__ import annotations

from typing import Any

from review.kubernetes import Obj, key, label
from review.security.admission import ADMISSION, admission_findings
from review.security.common import Finding, dicts
from review.security.netpol import policy_widening, unprotected_namespaces
from review.security.objects import context as objects_context
from review.security.objects import unknown_lines
from review.security.pods import pod_security_lowered, pods_widening
from review.security.quotas import (
    KUEUE,
    PLANNED_KINDS,
    QUEUE_KINDS,
    ClusterPlan,
    priority_lines,
    queue_lines,
    resource_quota_lines,
)
from review.security.rbac import aggregation_widening, binding_widening, rule_widening

Plans = tuple[ClusterPlan | None, ClusterPlan | None]  # BASE's and HEAD's fleet plan for the cluster (quotas.py)

# --- Clusters -------------------------------------------------------------------------------------


def _object(k: tuple[str, str, str, str], old: Obj | None, new: Obj | None, context: dict[str, Any]) -> list[str]:
    group, kind = k[0], k[1]
    if kind in ADMISSION and group == "admissionregistration.k8s.io":
        return admission_findings(old, new) + _unknown(k, old, new, context)
    if new is None:
        return (["removed"] if kind == "NetworkPolicy" else []) + _unknown(k, old, new, context)
    said = pods_widening(old, new)
    if group == "rbac.authorization.k8s.io":
        if kind in ("Role", "ClusterRole"):
            said += rule_widening(old, new, kind)
        if kind == "ClusterRole":
            said += aggregation_widening(old, new, context["selectors"])
        if kind in ("RoleBinding", "ClusterRoleBinding"):
            said += binding_widening(old, new)
    if kind == "NetworkPolicy" and group == "networking.k8s.io":
        said += policy_widening(old, new, context["names"], k[2] in context["policed"])
    if kind == "Namespace" and not group:
        said += pod_security_lowered(old, new)
    before, after = context["plans"]
    if group == KUEUE and kind in QUEUE_KINDS:
        said += queue_lines(k, old, new, before, after)
    if group == KUEUE and kind == "WorkloadPriorityClass":
        said += priority_lines(k[3], old, new, before, after)
    if kind == "ResourceQuota" and not group:
        said += resource_quota_lines(k, old, new, before, after)
    return said + _unknown(k, old, new, context)


def _unknown(k: tuple[str, str, str, str], old: Obj | None, new: Obj | None, context: dict[str, Any]) -> list[str]:
    """The default deny (objects.py), but for what the destructive section says already."""
    if new is None:
        gone_with_namespace = k[2] in context["removed_namespaces"] or (not k[0] and k[1] == "Namespace")
        if gone_with_namespace or k[1] == "CustomResourceDefinition":
            return []  # destructive already, with everything in it
    return unknown_lines(k, old, new, context["objects"])


def cluster_findings(
    cluster: str, before: list[Obj], after: list[Obj], names: dict[str, str], plans: Plans = (None, None)
) -> list[Finding]:
    old = {key(o): o for o in before}
    new = {key(o): o for o in after}
    context = {
        "plans": plans,
        "objects": objects_context(before, after, plans),
        "removed_namespaces": {k[3] for k in old if k[1] == "Namespace" and not k[0] and k not in new},
        "names": names,
        "policed": {k[2] for k in old if k[1] == "NetworkPolicy"},
        "selectors": {  # ClusterRoles that collect others' rules, by their selectors
            k[3]: dicts((o.get("aggregationRule") or {}).get("clusterRoleSelectors"))
            for k, o in new.items()
            if k[1] == "ClusterRole" and k[3] and o.get("aggregationRule")
        },
    }
    added_namespaces = {k[3] for k in new if k[1] == "Namespace" and not k[0] and k not in old}
    out = []
    for k in [*new, *(k for k in old if k not in new)]:
        # An object the change leaves alone still answers to the plan when the plan's word on it moves (its
        # quota table would otherwise show what Argo CD never applies).
        if old.get(k) == new.get(k) and not (k[1] in PLANNED_KINDS and plans[0] != plans[1]):
            continue
        if said := _object(k, old.get(k), new.get(k), context):
            prefix = "new " if k not in old else ""
            namespace = k[3] if k[1] == "Namespace" and not k[0] else k[2]  # a new namespace is its own bundle
            fresh = namespace if k not in old and namespace in added_namespaces else ""
            out.append(Finding(cluster, f"{prefix}{label(k)} {'; '.join(said)}", fresh))
    out += [
        Finding(cluster, f"namespace {ns} has no NetworkPolicy left: all its traffic is admitted")
        for ns in unprotected_namespaces(before, after)
    ]
    return out
