"""One cluster's objects, before and after: each object's findings."""

from __future__ import annotations

from typing import Any

from review.kubernetes import Obj, key, label
from review.security.admission import ADMISSION, admission_findings
from review.security.common import Finding, dicts
from review.security.netpol import policy_widening, unprotected_namespaces
from review.security.pods import pod_security_lowered, pods_widening
from review.security.rbac import aggregation_widening, binding_widening, rule_widening

# --- Clusters -------------------------------------------------------------------------------------


def _object(k: tuple[str, str, str, str], old: Obj | None, new: Obj | None, context: dict[str, Any]) -> list[str]:
    group, kind = k[0], k[1]
    if kind in ADMISSION and group == "admissionregistration.k8s.io":
        return admission_findings(old, new)
    if new is None:
        return ["removed"] if kind == "NetworkPolicy" else []
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
    return said


def cluster_findings(cluster: str, before: list[Obj], after: list[Obj], names: dict[str, str]) -> list[Finding]:
    old = {key(o): o for o in before}
    new = {key(o): o for o in after}
    context = {
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
        if old.get(k) == new.get(k):
            continue
        if said := _object(k, old.get(k), new.get(k), context):
            prefix = "new " if k not in old else ""
            fresh = k[2] if k not in old and k[2] in added_namespaces else ""
            out.append(Finding(cluster, f"{prefix}{label(k)} {'; '.join(said)}", fresh))
    out += [
        Finding(cluster, f"namespace {ns} has no NetworkPolicy left: all its traffic is admitted")
        for ns in unprotected_namespaces(before, after)
    ]
    return out
