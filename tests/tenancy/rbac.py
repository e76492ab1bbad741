"""A small RBAC authorizer over built objects, shaped like Kubernetes' (plugin/pkg/auth/authorizer/rbac).

A request is allowed when some binding that applies to it names the user (User), one of its groups
(Group) or its service account (ServiceAccount), and the role it refers to has a rule matching the
API group, resource (with subresource), verb and, where the rule lists any, the object's name.
ClusterRoleBindings apply in every namespace and to cluster-scoped requests; a RoleBinding only in
its own namespace, to its namespace's Role or to a ClusterRole. `*` matches anything in apiGroups,
resources and verbs (https://kubernetes.io/docs/reference/access-authn-authz/rbac/).
Not modelled: aggregated ClusterRoles, nonResourceURLs, escalate/bind/impersonate.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ("system:authenticated",)


@dataclass(frozen=True)
class Access:
    verb: str
    group: str  # API group, "" for the core group
    resource: str  # with its subresource: pods/log
    namespace: str = ""  # "" for a cluster-scoped request
    name: str = ""  # "" for a list or a create without a name


def _subject_matches(subject: Mapping[str, Any], user: User, binding_namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return bool(name == user.name)
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return user.name == f"system:serviceaccount:{namespace}:{name}"
    return False


def _rule_matches(rule: Mapping[str, Any], access: Access) -> bool:
    def has(values: Sequence[str], value: str) -> bool:
        return "*" in values or value in values

    names: Sequence[str] = rule.get("resourceNames") or []
    return (
        has(rule.get("apiGroups") or [], access.group)
        and has(rule.get("resources") or [], access.resource)
        and has(rule.get("verbs") or [], access.verb)
        and (not names or access.name in names)
    )


def allowed(objects: Iterable[Obj], user: User, access: Access) -> bool:
    objects = list(objects)
    roles = {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o.get("rules") or []
        for o in objects
        if o.get("kind") in ("Role", "ClusterRole")
    }
    for binding in objects:
        kind = binding.get("kind")
        if kind not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        namespace = binding["metadata"].get("namespace", "") if kind == "RoleBinding" else ""
        if kind == "RoleBinding" and namespace != access.namespace:
            continue
        if not any(_subject_matches(s, user, namespace) for s in binding.get("subjects") or []):
            continue
        ref = binding["roleRef"]
        role_namespace = namespace if ref["kind"] == "Role" else ""
        if any(_rule_matches(rule, access) for rule in roles.get((ref["kind"], role_namespace, ref["name"]), [])):
            return True
    return False
