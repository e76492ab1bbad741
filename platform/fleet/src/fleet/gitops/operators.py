"""What the operators' group (fleet.yaml `project.operators_group`) may do: exactly what the runbooks use.

The runbooks (platform/fleet/runbooks/) are run by the on-call with their own Google identity, so each
command there must be allowed here, and nothing more: tests/gitops/test_runbooks.py evaluates every page's
commands against these objects, and fails on a rule no page, `warden hold/release/report/held` or
`gkr health` uses. The request each kubectl command makes (https://kubernetes.io/docs/reference/
access-authn-authz/authorization/#determine-the-request-verb; subresources as in the RBAC docs,
"Referring to resources"): `logs` is get on pods/log, `port-forward` get (WebSocket, kubectl >= 1.30)
or create (SPDY) on pods/portforward, `scale` patch on deployments/scale, `get events` list on events,
`delete pod` delete on pods (then a watch until it is gone), `logs deploy/x` and `port-forward deploy/x`
get the Deployment and list its pods first.

Where: pod debugging in each team namespace, Warden's and Kueue's; Warden's own objects by name; Warden's
and the nodes' Events in `default` (where Warden and the kubelet write them); Kueue's queues and workloads
cluster-wide, read only; Warden's Argo CD Application by name, to pause its automated sync while Warden is
scaled by hand (the root application leaves that one field alone: fleet.gitops.argocd.root).
"""

from __future__ import annotations

from typing import Any

from contract.names import WARDEN_CONFIGMAP, WARDEN_KSA
from fleet import names
from fleet.gitops.objects import Obj, obj
from fleet.model import Fleet

RBAC = "rbac.authorization.k8s.io/v1"
# `warden hold/release/report/held`, `gkr health`: read and patch Nodes. Teams never get it: patching a Node writes
# Warden's record and preflight's failure annotation, which Warden trusts (warden/trust.py;
# tests/tenancy/test_node_operators.py checks who can).
NODE_OPERATOR_ROLE = "meridian-node-operator"
QUEUES_ROLE = "meridian-operator-queues"  # a ClusterQueue, and every Workload (`get workloads -A`), read only
READ_ROLE = "meridian-operator-read"  # pods, their logs and Deployments of one namespace, read only
RESTART_ROLE = "meridian-operator-restart"  # delete a pod (its controller recreates it) and wait until it is gone
RUNS_ROLE = "meridian-operator-runs"  # a team namespace's Events, port-forward to a pod (a run's Lighthouse)
WARDEN_ROLE = "meridian-operator-warden"  # Warden's Deployment scale, Lease, PodMonitoring and config, by name
EVENTS_ROLE = "meridian-operator-events"  # Warden's and the kubelets' Events about Nodes, in `default`
SYNC_ROLE = "meridian-operator-sync"  # pause and resume automated sync of Warden's Argo CD Application
WARDEN_APPLICATION = "warden"  # fleet.gitops.argocd.overlay_apps
# A Node's Events (the kubelet's, Warden's: health_read.EVENTS_PATH) are recorded in this namespace.
NODE_EVENTS_NAMESPACE = "default"
KUEUE_NAMESPACE = "kueue-system"


def _rule(group: str, resources: list[str], verbs: list[str], *resource_names: str) -> dict[str, Any]:
    rule: dict[str, Any] = {"apiGroups": [group], "resources": resources, "verbs": verbs}
    if resource_names:
        rule["resourceNames"] = list(resource_names)
    return rule


def _subjects(group: str) -> list[dict[str, str]]:
    return [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}]


def _ref(kind: str, name: str) -> dict[str, str]:
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}


def cluster_roles() -> list[Obj]:
    """The roles, cluster-scoped so that one definition serves every namespace it is bound in."""
    return [
        obj(RBAC, "ClusterRole", NODE_OPERATOR_ROLE, rules=[_rule("", ["nodes"], ["get", "list", "patch"])]),
        obj(
            RBAC,
            "ClusterRole",
            QUEUES_ROLE,
            rules=[
                _rule("kueue.x-k8s.io", ["clusterqueues"], ["get"]),
                _rule("kueue.x-k8s.io", ["workloads"], ["get", "list"]),
            ],
        ),
        obj(
            RBAC,
            "ClusterRole",
            READ_ROLE,
            rules=[
                _rule("", ["pods"], ["get", "list"]),
                _rule("", ["pods/log"], ["get"]),
                _rule("apps", ["deployments"], ["get"]),
            ],
        ),
        obj(RBAC, "ClusterRole", RESTART_ROLE, rules=[_rule("", ["pods"], ["delete", "watch"])]),
        obj(
            RBAC,
            "ClusterRole",
            RUNS_ROLE,
            rules=[_rule("", ["events"], ["list"]), _rule("", ["pods/portforward"], ["get", "create"])],
        ),
    ]


def namespaced_roles() -> list[Obj]:
    """Roles over named objects, in the one namespace that holds them."""
    warden, warden_ns = WARDEN_KSA, names.WARDEN_NAMESPACE
    return [
        obj(
            RBAC,
            "Role",
            WARDEN_ROLE,
            warden_ns,
            rules=[
                _rule("apps", ["deployments/scale"], ["patch"], warden),
                _rule("coordination.k8s.io", ["leases"], ["get"], warden),
                _rule("monitoring.googleapis.com", ["podmonitorings"], ["get"], warden),
                _rule("", ["configmaps"], ["get"], WARDEN_CONFIGMAP),  # `gkr health` reads Warden's cadence
            ],
        ),
        obj(RBAC, "Role", EVENTS_ROLE, NODE_EVENTS_NAMESPACE, rules=[_rule("", ["events"], ["list"])]),
        obj(
            RBAC,
            "Role",
            SYNC_ROLE,
            names.ARGOCD_NAMESPACE,
            rules=[_rule("argoproj.io", ["applications"], ["get", "patch"], WARDEN_APPLICATION)],
        ),
    ]


def bindings(fleet: Fleet, group: str) -> list[Obj]:
    """Who: the operators' group, in the namespaces each role is needed in."""
    teams = [names.team_namespace(t.name) for t in fleet.teams]
    where = {
        READ_ROLE: [*teams, names.WARDEN_NAMESPACE, KUEUE_NAMESPACE],
        RESTART_ROLE: [*teams, names.WARDEN_NAMESPACE],
        RUNS_ROLE: teams,
    }
    subjects = _subjects(group)
    found = [  # each binding is named after its role (the node operators' binding keeps its earlier name)
        obj(
            RBAC,
            "ClusterRoleBinding",
            f"{NODE_OPERATOR_ROLE}s",
            roleRef=_ref("ClusterRole", NODE_OPERATOR_ROLE),
            subjects=subjects,
        ),
        obj(RBAC, "ClusterRoleBinding", QUEUES_ROLE, roleRef=_ref("ClusterRole", QUEUES_ROLE), subjects=subjects),
    ]
    for role, namespaces in where.items():
        found += [
            obj(RBAC, "RoleBinding", role, ns, roleRef=_ref("ClusterRole", role), subjects=subjects)
            for ns in namespaces
        ]
    for named in namespaced_roles():
        name, namespace = named["metadata"]["name"], named["metadata"]["namespace"]
        found.append(obj(RBAC, "RoleBinding", name, namespace, roleRef=_ref("Role", name), subjects=subjects))
    return found


def operator_objects(fleet: Fleet) -> list[Obj]:
    """The operators' roles and bindings; none when the fleet names no operators' group."""
    group = fleet.project.operators_group
    if group is None:
        return []
    return [*cluster_roles(), *namespaced_roles(), *bindings(fleet, group)]
