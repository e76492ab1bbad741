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

RBAC cannot say which fields a patch may change, so `patch` on that Application would also let the group change its
source, revision, destination or project, or start a sync of any revision, and deploy what nobody reviewed. The
cluster refuses that: a ValidatingAdmissionPolicy (`sync_guard`) lets the group change only
`spec.syncPolicy.automated.enabled` of an Application, and neither create nor delete one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from contract.names import WARDEN_CONFIGMAP, WARDEN_KSA
from fleet import names
from fleet.gitops.admission import policy_binding, validating_policy
from fleet.gitops.cel import literal, resource_rules
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
SYNC_GUARD = "meridian-operator-sync-only"  # the policy: of an Application, the group changes that one field only
WARDEN_APPLICATION = "warden"  # fleet.gitops.argocd.overlay_apps
# A Node's Events (the kubelet's, Warden's: health_read.EVENTS_PATH) are recorded in this namespace.
NODE_EVENTS_NAMESPACE = "default"
# checkov's CKV_K8S_21 (nothing in `default`), answered where the objects are made: Events about a
# cluster-scoped object (a Node) are written to `default`, so reading them needs a Role there.
DEFAULT_NAMESPACE_REASON = {
    "checkov.io/skip1": "CKV_K8S_21=Events about Nodes are recorded in the default namespace, so reading them needs a Role there"
}
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
        obj(
            RBAC,
            "Role",
            EVENTS_ROLE,
            NODE_EVENTS_NAMESPACE,
            annotations=DEFAULT_NAMESPACE_REASON,
            rules=[_rule("", ["events"], ["list"])],
        ),
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
        found.append(
            obj(
                RBAC,
                "RoleBinding",
                name,
                namespace,
                annotations=named["metadata"].get("annotations"),
                roleRef=_ref("Role", name),
                subjects=subjects,
            )
        )
    return found


# What the API server hands the policy: `object` and `oldObject` as plain maps (k8s.io/apiserver
# pkg/admission/plugin/cel/filter.go, objectToResolveVal), so comprehensions range over their keys; dyn() because
# the type check sees the Application's schema, whose objects are not maps. CEL has no map update, so "equal but
# for one key" is spelled key by key, both ways (a key added or removed counts).
NEW, OLD = "variables.new", "variables.old"
PAUSE_FIELD = "spec.syncPolicy.automated.enabled"  # fleet.gitops.argocd.PAUSE_POINTER
OWN_METADATA = ("labels", "annotations", "finalizers", "ownerReferences")  # the rest the API server keeps or writes


def _same_except(new: str, old: str, keep: list[str]) -> str:
    """CEL: maps `new` and `old` hold the same keys with the same values, apart from the keys in `keep`."""
    skip = literal(keep)
    return (
        f"{new}.all(k, k in {skip} || (k in {old} && {old}[k] == {new}[k])) && {old}.all(k, k in {skip} || k in {new})"
    )


def _same_key(new: str, old: str, key: str, inner: Callable[[str, str], str]) -> str:
    """CEL: `key` is in both maps or in neither, and where it is, inner(its new value, its old value) holds."""
    k = literal(key)
    return f"({k} in {new}) == ({k} in {old}) && (!({k} in {new}) || ({inner(f'{new}[{k}]', f'{old}[{k}]')}))"


def _only_pause(new: str, old: str) -> str:
    """CEL: two Application specs differ at most in syncPolicy.automated.enabled."""

    def automated(n: str, o: str) -> str:
        return _same_except(n, o, ["enabled"])

    def sync(n: str, o: str) -> str:
        return f"{_same_except(n, o, ['automated'])} && {_same_key(n, o, 'automated', automated)}"

    return f"{_same_except(new, old, ['syncPolicy'])} && {_same_key(new, old, 'syncPolicy', sync)}"


def _refused(what: str, expression: str) -> dict[str, str]:
    return {
        "expression": expression,
        "message": f"the operators' group may not {what}; of an Argo CD Application it changes only {PAUSE_FIELD}, to "
        'pause or resume automated sync (platform/fleet/runbooks/README.md, "Argo CD"); make any other change as a '
        "commit to the repository, which Argo CD syncs",
        "reason": "Forbidden",
    }


def sync_guard(group: str) -> Obj:
    """Of an Argo CD Application, the operators' group changes only whether its automated sync is on.

    Matched by membership of the group (matchConditions), nobody else's: Argo CD writes Applications itself, with
    its controller's and API server's service accounts, and those writes must pass (argo-cd v3.5.1
    controller/appcontroller.go persistAppStatus and setOperationState patch `status`, annotations and
    `operation`; util/argo/argo.go SetAppOperation, called by the controller's autoSync and by
    server/application/application.go Sync, updates the whole object). The CRD has no status subresource
    (manifests/crds/application-crd.yaml), so `status` is compared too: the controller resumes an operation in
    progress from status as it finds it (appcontroller.go processRequestedAppOperation), a forged one is a sync of
    any revision. PATCH arrives as UPDATE; the API server's own metadata (resourceVersion, generation,
    managedFields) moves on every write and is not compared.
    """
    top = _same_except(NEW, OLD, ["metadata", "spec"])
    metadata = " && ".join(
        _same_key(f"{NEW}.metadata", f"{OLD}.metadata", key, lambda n, o: f"{n} == {o}") for key in OWN_METADATA
    )
    update = "request.operation != 'UPDATE' || "
    policy = validating_policy(
        SYNC_GUARD,
        resource_rules([("argoproj.io", "v1alpha1", ("applications",))], ("CREATE", "UPDATE", "DELETE")),
        [{"name": "new", "expression": "dyn(object)"}, {"name": "old", "expression": "dyn(oldObject)"}],
        [
            _refused("create or delete an Argo CD Application", "request.operation == 'UPDATE'"),
            _refused("change an Application's status or operation (a sync)", f"{update}({top})"),
            _refused("change an Application's labels, annotations, finalizers or owners", f"{update}({metadata})"),
            _refused(
                "change an Application's source, revision, destination, project or sync policy",
                f"{update}({_only_pause(f'{NEW}.spec', f'{OLD}.spec')})",
            ),
        ],
        namespaced=False,  # every namespace Argo CD may watch (the group's Role is in `argocd` only)
    )
    groups = "request.userInfo.groups"
    policy["spec"]["matchConditions"] = [
        {"name": "operators", "expression": f"has({groups}) && {literal(group)} in {groups}"}
    ]
    return policy


def operator_objects(fleet: Fleet) -> list[Obj]:
    """The operators' roles and bindings, and the policy that limits their patch; none when the fleet names no
    operators' group."""
    group = fleet.project.operators_group
    if group is None:
        return []
    guard = [sync_guard(group), policy_binding(SYNC_GUARD, namespaced=False)]
    return [*cluster_roles(), *namespaced_roles(), *bindings(fleet, group), *guard]
