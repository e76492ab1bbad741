"""The facts of a cluster's built Argo CD tree a reviewer checks: what runs with which rights.

Per cluster: how many objects of each kind; each application's project, source and namespace; each
project's reach; service accounts and their Google identities; RBAC rules and bindings; every pod
template's account, host access, privileges and images; NetworkPolicy peers and ports; admission
policies; queue and namespace quotas. tests/gitops/test_inventory.py compares them with the
written-down copy in tests/gitops/inventory/ (fleet.inventory has the format).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from fleet import names
from fleet.gitops.admission import policies
from fleet.gitops.check import ClusterTree
from fleet.gitops.objects import Obj
from fleet.gitops.validate import images

Facts = dict[str, Any]
SYNC_WAVE = "argocd.argoproj.io/sync-wave"
POD_CONTROLLERS = ("DaemonSet", "Deployment", "StatefulSet", "Job", "CronJob", "ReplicaSet", "Pod")


def key(o: Obj) -> str:
    """`namespace/name`, or the name of a cluster-wide object."""
    meta = o["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta["name"])


def selector(sel: dict[str, Any] | None) -> str:
    """A label selector in kubectl's syntax (`a=b,c in (d,e),!f`); `all` when it selects everything."""
    sel = sel or {}
    terms = [f"{k}={v}" for k, v in sorted(sel.get("matchLabels", {}).items())]
    for e in sel.get("matchExpressions", []):
        values = ",".join(e.get("values", []))
        terms.append(
            {"In": f"{e['key']} in ({values})", "NotIn": f"{e['key']} notin ({values})", "Exists": e["key"]}.get(
                e["operator"], f"!{e['key']}"
            )
        )
    return ",".join(terms) or "all"


def application(app: Obj) -> Facts:
    spec, source = app["spec"], app["spec"]["source"]
    where = source.get("path") or source.get("chart")
    return {
        "project": spec["project"],
        "namespace": spec["destination"].get("namespace"),
        "source": f"{source['repoURL']} {where} @ {source.get('targetRevision')}",
        "wave": int(app["metadata"].get("annotations", {}).get(SYNC_WAVE, 0)),
    }


def _kinds(entries: Iterable[dict[str, str]]) -> list[str]:
    return sorted("/".join(filter(None, (e.get("group"), e["kind"], e.get("name")))) for e in entries)


def project(p: Obj) -> Facts:
    """Where a project's applications may come from and write, and which kinds they may create."""
    spec = p["spec"]
    facts: Facts = {
        "sources": sorted(spec.get("sourceRepos", [])),
        "namespaces": sorted(d.get("namespace", "") for d in spec.get("destinations", [])),
        "cluster_kinds": _kinds(spec.get("clusterResourceWhitelist", [])),
    }
    for field, name in (("namespaceResourceWhitelist", "only_kinds"), ("namespaceResourceBlacklist", "never_kinds")):
        if field in spec:
            facts[name] = _kinds(spec[field])
    return facts


def service_account(o: Obj) -> Facts:
    facts: Facts = {}
    google = o["metadata"].get("annotations", {}).get(names.GCP_SERVICE_ACCOUNT_ANNOTATION)
    if google:
        facts["acts_as"] = google
    if "automountServiceAccountToken" in o:
        facts["automount_token"] = o["automountServiceAccountToken"]
    return facts


def rules(o: Obj) -> list[str]:
    """Each RBAC rule as `verbs on group/resources [names]`."""
    out = []
    for rule in o.get("rules") or []:
        verbs = ",".join(rule.get("verbs", []))
        if "nonResourceURLs" in rule:
            out.append(f"{verbs} on {','.join(rule['nonResourceURLs'])}")
            continue
        groups = ",".join(g or "core" for g in rule.get("apiGroups", []))
        only = f" [{','.join(rule['resourceNames'])}]" if rule.get("resourceNames") else ""
        out.append(f"{verbs} on {groups}/{','.join(rule.get('resources', []))}{only}")
    return out


def binding(o: Obj) -> Facts:
    ref = o["roleRef"]
    subjects = [f"{s['kind']} {s.get('namespace', '') and s['namespace'] + '/'}{s['name']}" for s in o["subjects"]]
    return {"role": f"{ref['kind']} {ref['name']}", "subjects": sorted(subjects)}


def _pod_spec(o: Obj) -> dict[str, Any]:
    if o["kind"] == "Pod":
        return dict(o.get("spec") or {})
    template = (o.get("spec") or {}).get("template") or {}
    if o["kind"] == "CronJob":
        template = o["spec"]["jobTemplate"]["spec"]["template"]
    return dict(template.get("spec") or {})


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


def pod(o: Obj) -> Facts:
    """What a pod template may do on its node: its account, host access, privileges, and what it runs."""
    spec = _pod_spec(o)
    containers = _containers(spec)
    context = {c["name"]: c.get("securityContext") or {} for c in containers}
    facts: Facts = {
        "service_account": spec.get("serviceAccountName", "default"),
        "images": sorted(set(images(o))),
    }
    optional = {
        "automount_token": spec.get("automountServiceAccountToken"),
        "host": [f for f in ("hostNetwork", "hostPID", "hostIPC") if spec.get(f)],
        "host_paths": sorted(v["hostPath"]["path"] for v in spec.get("volumes", []) if "hostPath" in v),
        "host_ports": sorted(p["hostPort"] for c in containers for p in c.get("ports", []) if p.get("hostPort")),
        "privileged": [name for name, sc in context.items() if sc.get("privileged")],
        "privilege_escalation": [name for name, sc in context.items() if sc.get("allowPrivilegeEscalation")],
        "capabilities": {
            name: sc["capabilities"]["add"] for name, sc in context.items() if sc.get("capabilities", {}).get("add")
        },
        "priority_class": spec.get("priorityClassName"),
    }
    facts |= {name: value for name, value in optional.items() if value not in (None, [], {})}
    return facts


def peer(p: dict[str, Any]) -> str:
    """A NetworkPolicy peer: a range (with exceptions), or namespaces and pods by selector."""
    if "ipBlock" in p:
        block = p["ipBlock"]
        return str(block["cidr"]) + (f" except {','.join(block['except'])}" if block.get("except") else "")
    parts = [f"namespaces[{selector(p['namespaceSelector'])}]"] if "namespaceSelector" in p else []
    if "podSelector" in p or not parts:
        parts.append(f"pods[{selector(p.get('podSelector'))}]")
    return " ".join(parts)


def port(p: dict[str, Any]) -> str:
    """`TCP 9464-9471`; `TCP *` for every port of a protocol."""
    number = str(p["port"]) + (f"-{p['endPort']}" if "endPort" in p else "") if "port" in p else "*"
    return f"{p.get('protocol', 'TCP')} {number}"


def network_policy(o: Obj) -> Facts:
    """Which pods it selects and, per rule, which peers reach them on which ports (`any`: no limit)."""
    spec = o["spec"]
    facts: Facts = {"pods": selector(spec.get("podSelector")), "types": spec.get("policyTypes", [])}
    for direction, peers in (("ingress", "from"), ("egress", "to")):
        if direction in spec:
            facts[direction] = [
                {
                    peers: [peer(p) for p in rule[peers]] if peers in rule else ["any"],
                    "ports": [port(p) for p in rule["ports"]] if "ports" in rule else ["any"],
                }
                for rule in spec[direction]
            ]
    return facts


def _resource_rule(rule: dict[str, Any]) -> str:
    groups = ",".join(g for g in rule["apiGroups"] if g)
    return f"{','.join(rule['operations'])} {groups + '/' if groups else ''}{','.join(rule['resources'])}"


def _bound(b: Obj) -> str:
    namespaces = selector(b["spec"].get("matchResources", {}).get("namespaceSelector"))
    return f"{','.join(b['spec']['validationActions'])} in namespaces[{namespaces}]"


def admission_policy(policy: Obj, bound: list[Obj]) -> Facts:
    """What a ValidatingAdmissionPolicy matches, what it refuses (its messages) and how it is bound."""
    spec = policy["spec"]
    facts: Facts = {
        "failure": spec.get("failurePolicy"),
        "matches": [_resource_rule(r) for r in spec["matchConstraints"]["resourceRules"]],
        "namespaces": selector(spec["matchConstraints"].get("namespaceSelector")),
        "refuses": [v["message"] for v in spec["validations"]],
        "bindings": sorted(_bound(b) for b in bound),
    }
    if "matchConditions" in spec:  # whose requests it judges: a policy for one group reads as one for all otherwise
        facts["only_when"] = [c["expression"] for c in spec["matchConditions"]]
    return facts


def cluster_queue(o: Obj) -> Facts:
    """A ClusterQueue's quota per flavor and resource: `nominal`, and what it may borrow or lend."""
    spec = o["spec"]
    flavors: Facts = {}
    for group in spec.get("resourceGroups", []):
        for flavor in group["flavors"]:
            flavors[flavor["name"]] = {
                r["name"]: " ".join(
                    f"{label} {r[field]}"
                    for field, label in (
                        ("nominalQuota", "nominal"),
                        ("borrowingLimit", "borrow"),
                        ("lendingLimit", "lend"),
                    )
                    if field in r
                )
                for r in flavor["resources"]
            }
    return {"cohort": spec.get("cohortName"), "namespaces": selector(spec.get("namespaceSelector")), "flavors": flavors}


def _section(objects: Iterable[Obj], kinds: tuple[str, ...], facts_of: Any, prefix: bool = False) -> Facts:
    return {(f"{o['kind']} " if prefix else "") + key(o): facts_of(o) for o in objects if o.get("kind") in kinds}


def cluster(tree: ClusterTree) -> Facts:
    """Everything Argo CD applies to the cluster from this repository, and the upstream sources it pins."""
    objects = [o for _, o in tree.objects()]
    return {
        "cluster": tree.cluster,
        "kinds": dict(Counter(str(o.get("kind")) for o in objects)),
        "applications": _section(tree.argocd, ("Application",), application),
        "projects": _section(tree.argocd, ("AppProject",), project),
        "service_accounts": _section(objects, ("ServiceAccount",), service_account),
        "roles": _section(objects, ("Role", "ClusterRole"), rules, prefix=True),
        "bindings": _section(objects, ("RoleBinding", "ClusterRoleBinding"), binding, prefix=True),
        "pods": _section(objects, POD_CONTROLLERS, pod, prefix=True),
        "network_policies": _section(objects, ("NetworkPolicy",), network_policy),
        "admission": {name: admission_policy(p, bound) for name, (p, bound) in policies(objects).items()},
        "queues": _section(objects, ("ClusterQueue",), cluster_queue),
        "namespace_quotas": _section(objects, ("ResourceQuota",), lambda o: o["spec"].get("hard", {})),
    }
