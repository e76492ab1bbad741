"""Build every cluster's Argo CD tree the way Argo CD will, validate it, cross-check it.

For one cluster: the root application and the projects and applications it
syncs; every application whose source is this repository is built with real
kustomize; every object is validated against its schema; then references
between objects are checked (namespaces, service accounts, priority classes,
queues, flavors, config maps, roles) together with digests and duplicates.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fleet.gitops import argocd, remote
from fleet.gitops.objects import Obj
from fleet.gitops.teams import DEFAULT_PRIORITY_ANNOTATION
from fleet.gitops.validate import BuildError, CrdSchemas, Finding, build, images, object_id, validate_object
from fleet.model import Fleet, Region

# Namespaces and roles a GKE cluster has before Argo CD applies anything.
PREEXISTING_NAMESPACES = {"default", "kube-system", argocd.NAMESPACE}
BUILTIN_PRIORITY_CLASSES = {"system-cluster-critical", "system-node-critical"}
BUILTIN_CLUSTER_ROLES = {"admin", "edit", "view", "cluster-admin"}


@dataclass
class ClusterTree:
    cluster: str
    argocd: list[Obj] = field(default_factory=list)  # root, projects, applications
    apps: dict[str, list[Obj]] = field(default_factory=dict)  # this repository's applications, built
    upstream: dict[str, dict[str, Any]] = field(default_factory=dict)  # other applications' sources

    def objects(self) -> list[tuple[str, Obj]]:
        return [("argocd", o) for o in self.argocd] + [(app, o) for app, objs in self.apps.items() for o in objs]


def load_tree(repo: Path, fleet: Fleet, region: Region, kubectl: str = "kubectl") -> tuple[ClusterTree, list[Finding]]:
    return load_cluster(repo, fleet.cluster_name(region), kubectl)


def load_cluster(repo: Path, cluster: str, kubectl: str = "kubectl") -> tuple[ClusterTree, list[Finding]]:
    """The cluster's Argo CD tree as committed under argocd/clusters/<cluster>/, built.

    Applications whose source is the root application's repository are built
    from this checkout; the others are upstream and only recorded. Before a
    folder is built, every kustomization it reaches is read: one that names a
    remote resource or base is a finding and the folder is not built, so
    nothing is fetched (fleet.gitops.remote).
    """
    tree = ClusterTree(cluster)
    findings: list[Finding] = []
    root_file = repo / argocd.CLUSTERS_DIR / cluster / "root.yaml"
    if not root_file.is_file():
        return tree, [
            Finding(cluster, f"no root application: {root_file.relative_to(repo)} is missing; run make generate")
        ]
    tree.argocd = [d for d in yaml.safe_load_all(root_file.read_text(encoding="utf-8")) if d]
    root = next((d for d in tree.argocd if d.get("kind") == "Application" and d["metadata"]["name"] == "root"), None)
    if root is None:
        return tree, [Finding(cluster, f"{root_file.relative_to(repo)} holds no Application named root")]
    own_repo = root["spec"]["source"]["repoURL"]
    root_path = _inside(repo, root["spec"]["source"].get("path", ""))
    if root_path is None:
        return tree, [
            Finding(
                cluster,
                f"root application's source path {root['spec']['source'].get('path')} lies outside the repository",
            )
        ]
    remote_findings = remote.reachable(repo, root_path)
    if remote_findings:
        return tree, remote_findings
    try:
        tree.argocd += build(root_path, kubectl)
    except BuildError as exc:
        return tree, [Finding(cluster, str(exc))]
    for app in tree.argocd:
        if app.get("kind") != "Application" or app is root:
            continue
        name, source = app["metadata"]["name"], app["spec"]["source"]
        if source.get("repoURL") != own_repo:
            tree.upstream[name] = source
        else:
            findings += _build_app(tree, repo, f"{cluster}/{name}", name, source, kubectl)
    return tree, findings


def _build_app(
    tree: ClusterTree, repo: Path, where: str, name: str, source: dict[str, Any], kubectl: str
) -> list[Finding]:
    """Build one of this repository's applications into `tree`; or say why it cannot be built."""
    path = _inside(repo, source.get("path", ""))
    if path is None:
        return [Finding(where, f"source path {source.get('path')} lies outside the repository")]
    if not path.is_dir():
        return [Finding(where, f"source path {source.get('path')} does not exist")]
    remote_findings = remote.reachable(repo, path)
    if remote_findings:
        return remote_findings
    try:
        tree.apps[name] = build(path, kubectl)
    except BuildError as exc:
        return [Finding(where, str(exc))]
    return []


def _inside(repo: Path, relative: object) -> Path | None:
    """The folder an application's source path names, or None when it leaves the repository.

    The plan review renders a pull request's committed tree with its own code: an
    absolute or `..` path must not make it read (and post) files from elsewhere.
    """
    path = (repo / str(relative)).resolve()
    return path if path.is_relative_to(repo.resolve()) else None


def mutable_sources(tree: ClusterTree) -> list[Finding]:
    """The cluster's upstream Application sources that can sync other content under the same reference
    (fleet.gitops.remote.source_problem): a tag, a branch, a chart version without a digest."""
    root = next((a for a in tree.argocd if a.get("kind") == "Application" and a["metadata"]["name"] == "root"), None)
    source = (root or {}).get("spec", {}).get("source", {})
    own, folder = source.get("repoURL", ""), source.get("path") or tree.cluster  # the folder the root syncs
    return [
        Finding(f"{folder}: Application {app['metadata']['name']}", problem)
        for app in tree.argocd
        if app.get("kind") == "Application"
        for source in remote.application_sources(app)
        if (problem := remote.source_problem(source, own)) is not None
    ]


def check_tree(fleet: Fleet, region: Region, tree: ClusterTree, crds: CrdSchemas) -> list[Finding]:
    findings = mutable_sources(tree)
    for app, o in tree.objects():
        for problem in validate_object(o, fleet.versions.kubernetes, crds):
            findings.append(
                Finding(f"{tree.cluster}/{app}/{o.get('kind')}/{o.get('metadata', {}).get('name')}", problem)
            )
    return findings + _references(tree)


def _by_kind(objects: Iterable[Obj], kind: str) -> dict[tuple[str, str], Obj]:
    return {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects if o.get("kind") == kind}


def _names(objects: Iterable[Obj], kind: str) -> set[str]:
    return {name for _, name in _by_kind(objects, kind)}


def _quota_classes(objects: Iterable[Obj]) -> dict[str, set[str]]:
    """namespace -> the PriorityClasses its ResourceQuotas select (GKE's condition for system-* pods there)."""
    found: dict[str, set[str]] = {}
    for o in objects:
        if o.get("kind") != "ResourceQuota":
            continue
        for expression in (o.get("spec") or {}).get("scopeSelector", {}).get("matchExpressions", []):
            if expression.get("scopeName") == "PriorityClass" and expression.get("operator") == "In":
                found.setdefault(o["metadata"].get("namespace", ""), set()).update(expression.get("values", []))
    return found


def pinned(image: str) -> bool:
    """A digest, or a tag other than `latest`: a version the image workflow can later pin by digest."""
    if "@sha256:" in image:
        return True
    name = image.rsplit("/", 1)[-1]
    return ":" in name and name.rsplit(":", 1)[1] not in ("", "latest")


def _pod_spec(o: Obj) -> dict[str, Any]:
    spec = o.get("spec", {})
    template = spec.get("template", {}) if isinstance(spec, dict) else {}
    return dict(template.get("spec", {})) if isinstance(template, dict) else {}


@dataclass(frozen=True)
class _Known:
    """What the tree defines (and the cluster has before Argo CD), for checking references against."""

    namespaces: set[str]
    accounts: set[tuple[str, str]]
    config_maps: set[tuple[str, str]]
    priority_classes: set[str]
    workload_priorities: set[str]
    cluster_roles: set[str]
    roles: set[tuple[str, str]]
    queues: set[str]
    flavors: set[str]
    checks: set[str]
    topologies: set[str]
    provisioning: set[str]
    quota_classes: dict[str, set[str]]

    @classmethod
    def of(cls, tree: ClusterTree) -> _Known:
        objects = [o for _, o in tree.objects()]
        applications = [a for a in tree.argocd if a.get("kind") == "Application"]
        created = {
            a["spec"]["destination"]["namespace"]
            for a in applications
            if "CreateNamespace=true" in a["spec"].get("syncPolicy", {}).get("syncOptions", [])
        }
        return cls(
            namespaces=PREEXISTING_NAMESPACES | _names(objects, "Namespace") | created,
            accounts=set(_by_kind(objects, "ServiceAccount")),
            config_maps=set(_by_kind(objects, "ConfigMap")),
            priority_classes=BUILTIN_PRIORITY_CLASSES | _names(objects, "PriorityClass"),
            workload_priorities=_names(objects, "WorkloadPriorityClass"),
            cluster_roles=BUILTIN_CLUSTER_ROLES | _names(objects, "ClusterRole"),
            roles=set(_by_kind(objects, "Role")),
            queues=_names(objects, "ClusterQueue"),
            flavors=_names(objects, "ResourceFlavor"),
            checks=_names(objects, "AdmissionCheck"),
            topologies=_names(objects, "Topology"),
            provisioning=_names(objects, "ProvisioningRequestConfig"),
            quota_classes=_quota_classes(objects),
        )


def _duplicates(tree: ClusterTree) -> list[tuple[str, Obj, str]]:
    found = []
    seen: dict[tuple[str, str, str, str], str] = {}
    for app, o in tree.objects():
        key = object_id(o)
        if key in seen:
            found.append((app, o, f"also defined by application {seen[key]}"))
        seen[key] = app
    return found


def _pod_problems(o: Obj, known: _Known) -> list[str]:
    """What a workload's pod template names that does not exist, or may not be used there."""
    pod = _pod_spec(o)
    if not pod:
        return []
    found = []
    namespace = o["metadata"].get("namespace")
    account = pod.get("serviceAccountName", "default")
    if account != "default" and (namespace, account) not in known.accounts:
        found.append(f"service account {namespace}/{account} does not exist")
    priority = pod.get("priorityClassName")
    if priority and priority not in known.priority_classes:
        found.append(f"priority class {priority} does not exist")
    selected = known.quota_classes.get(namespace or "", set())
    if priority in BUILTIN_PRIORITY_CLASSES and namespace != "kube-system" and priority not in selected:
        found.append(f"priority class {priority} needs a ResourceQuota in {namespace} whose scopeSelector names it")
    for volume in pod.get("volumes", []):
        cm = volume.get("configMap", {}).get("name")
        if cm and (namespace, cm) not in known.config_maps:
            found.append(f"config map {namespace}/{cm} does not exist")
    return found


def _kind_problems(o: Obj, known: _Known) -> list[str]:
    """References particular to the object's kind: roles, queues, flavors, checks, topologies, priorities."""
    meta, spec, kind = o["metadata"], o.get("spec") or {}, o.get("kind")
    found = []
    if kind == "Namespace":
        priority = meta.get("annotations", {}).get(DEFAULT_PRIORITY_ANNOTATION)
        if priority and priority not in known.workload_priorities:
            found.append(f"default priority {priority} is not a WorkloadPriorityClass")
    if kind in ("RoleBinding", "ClusterRoleBinding"):
        ref = o["roleRef"]
        namespace = meta.get("namespace")
        roles = known.cluster_roles if ref["kind"] == "ClusterRole" else {n for ns, n in known.roles if ns == namespace}
        if ref["name"] not in roles:
            found.append(f"{ref['kind']} {ref['name']} does not exist")
    if kind == "LocalQueue" and spec.get("clusterQueue") not in known.queues:
        found.append(f"ClusterQueue {spec.get('clusterQueue')} does not exist")
    if kind == "ClusterQueue":
        for group in spec.get("resourceGroups", []):
            found += [
                f"ResourceFlavor {f['name']} does not exist"
                for f in group.get("flavors", [])
                if f["name"] not in known.flavors
            ]
        for check in spec.get("admissionChecksStrategy", {}).get("admissionChecks", []):
            if check["name"] not in known.checks:
                found.append(f"AdmissionCheck {check['name']} does not exist")
    if kind == "ResourceFlavor" and spec.get("topologyName") and spec["topologyName"] not in known.topologies:
        found.append(f"Topology {spec['topologyName']} does not exist")
    if kind == "AdmissionCheck" and spec.get("parameters", {}).get("name") not in known.provisioning:
        found.append(f"ProvisioningRequestConfig {spec.get('parameters', {}).get('name')} does not exist")
    return found


def _references(tree: ClusterTree) -> list[Finding]:
    """Duplicates, unpinned images and references to what nothing creates, in the order the objects come."""
    known = _Known.of(tree)
    problems = _duplicates(tree)
    for app, o in tree.objects():
        namespace = o["metadata"].get("namespace")
        if namespace and namespace not in known.namespaces:
            problems.append((app, o, f"namespace {namespace} is not created by any application"))
        problems += [
            (app, o, f"image {i} is not pinned by a version tag or digest") for i in images(o) if not pinned(i)
        ]
        problems += [(app, o, message) for message in [*_pod_problems(o, known), *_kind_problems(o, known)]]
    return [
        Finding(f"{tree.cluster}/{app}/{o.get('kind')}/{o['metadata'].get('name')}", message)
        for app, o, message in problems
    ]


def kinds(tree: ClusterTree) -> Counter[str]:
    return Counter(str(o.get("kind")) for objs in tree.apps.values() for o in objs)
