"""Argo CD projects as rendered: every synced object is permitted by its application's project, and the
powers that make a repository write equal to cluster-admin sit in the bootstrap and platform projects only."""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any

import pytest

from fleet.gitops import argocd
from fleet.gitops.argocd import refusal, source_permitted
from fleet.gitops.check import ClusterTree
from fleet.gitops.validate import Finding
from fleet.model import Fleet

# Cluster-scoped kinds in the rendered tree (everything else is namespaced).
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "APIService",
    "PriorityClass",
    "GKENetworkParamSet",
    "Network",
    *argocd.KUEUE_CLUSTER_KINDS,
    *(kind for _, kind in argocd.MONITORING_CLUSTER_KINDS),
}


def _projects(tree: ClusterTree) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o["spec"] for o in tree.argocd if o["kind"] == "AppProject"}


def _check(project: dict[str, Any], o: dict[str, Any], default_namespace: str) -> str | None:
    group = o["apiVersion"].rpartition("/")[0]
    namespace = "" if o["kind"] in CLUSTER_SCOPED else o["metadata"].get("namespace", default_namespace)
    return refusal(project, group, o["kind"], o["metadata"]["name"], namespace)


def test_every_synced_object_is_permitted_by_its_project(
    fleet: Fleet, trees: dict[str, tuple[ClusterTree, list[Finding]]]
) -> None:
    for tree, findings in trees.values():
        assert findings == []
        projects = _projects(tree)
        assert set(projects) == {"bootstrap", "platform", "fleet-config"}
        applications = {o["metadata"]["name"]: o for o in tree.argocd if o["kind"] == "Application"}
        root = applications.pop("root")
        refused = []
        # What the root application syncs (its apps folder), in the bootstrap project.
        for o in tree.argocd:
            if o is root or (o["kind"] == "AppProject" and o["metadata"]["name"] == "bootstrap"):
                continue  # root.yaml: applied once by the bootstrap script, not synced
            refused.append((o["kind"], _check(projects["bootstrap"], o, argocd.NAMESPACE)))
        for name, app in applications.items():
            project = projects[app["spec"]["project"]]
            destination = app["spec"]["destination"]["namespace"]
            assert source_permitted(project, app["spec"]["source"]["repoURL"]), name
            assert any(fnmatchcase(destination, d["namespace"]) for d in project["destinations"]), name
            for o in tree.apps.get(name, []):
                refused.append((f"{name}: {o['kind']} {o['metadata']['name']}", _check(project, o, destination)))
        assert [r for r in refused if r[1] is not None] == []


def test_upstream_applications_come_from_their_pinned_repositories(fleet: Fleet) -> None:
    projects = {p["metadata"]["name"]: p["spec"] for p in argocd.projects(fleet)}
    bootstrap, _ = argocd.root(fleet, fleet.regions[0])
    projects["bootstrap"] = bootstrap["spec"]
    assert projects["platform"]["sourceRepos"] == [
        argocd.ARGOCD_REPO,
        argocd.KUBERAY_REPO,
        argocd.KUEUE_REPO,
        fleet.gitops.repo,
    ]
    assert projects["fleet-config"]["sourceRepos"] == projects["bootstrap"]["sourceRepos"] == [fleet.gitops.repo]
    assert not source_permitted(projects["fleet-config"], argocd.KUEUE_REPO)
    for spec in projects.values():
        assert "*" not in spec["sourceRepos"]
        assert all(d["server"] == argocd.IN_CLUSTER and "*" not in d["namespace"] for d in spec["destinations"])


def _all_projects(fleet: Fleet) -> dict[str, dict[str, Any]]:
    projects = {p["metadata"]["name"]: p["spec"] for p in argocd.projects(fleet)}
    projects["bootstrap"] = argocd.root(fleet, fleet.regions[0])[0]["spec"]
    return projects


@pytest.mark.parametrize(
    ("group", "kind", "namespace", "allowed_in"),
    [
        ("argoproj.io", "AppProject", argocd.NAMESPACE, {"bootstrap"}),
        ("argoproj.io", "Application", argocd.NAMESPACE, {"bootstrap"}),
        ("argoproj.io", "ApplicationSet", argocd.NAMESPACE, set()),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding", "", {"platform"}),
        ("rbac.authorization.k8s.io", "ClusterRole", "", {"platform"}),
        ("apiextensions.k8s.io", "CustomResourceDefinition", "", {"platform"}),
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration", "", {"platform"}),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding", "", {"platform"}),
        ("rbac.authorization.k8s.io", "RoleBinding", "kube-system", set()),  # platform: not a destination
        ("rbac.authorization.k8s.io", "RoleBinding", "team-research", {"platform"}),
        ("", "Secret", "kube-system", set()),
        ("apps", "DaemonSet", "kube-system", {"fleet-config"}),
        ("kueue.x-k8s.io", "ClusterQueue", "", {"fleet-config"}),
        ("kueue.x-k8s.io", "LocalQueue", "team-research", {"fleet-config", "platform"}),  # team RBAC refuses it
        ("", "Namespace", "", {"platform"}),  # fleet-config: meridian-images only
        ("", "Node", "", set()),
    ],
)
def test_who_may_create_what(fleet: Fleet, group: str, kind: str, namespace: str, allowed_in: set[str]) -> None:
    projects = _all_projects(fleet)
    name = "anything"
    assert {p for p, spec in projects.items() if refusal(spec, group, kind, name, namespace) is None} == allowed_in


def test_forbidden_objects_slipped_into_an_application_are_refused(
    fleet: Fleet, trees: dict[str, tuple[ClusterTree, list[Finding]]]
) -> None:
    tree, _ = next(iter(trees.values()))
    projects = _projects(tree)
    admin = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "me-too"},
        "roleRef": {"kind": "ClusterRole", "name": "cluster-admin"},
    }
    project = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "AppProject",
        "metadata": {"name": "x", "namespace": "argocd"},
    }
    role_binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "x"}}
    assert _check(projects["fleet-config"], admin, "default") == (
        "cluster-scoped rbac.authorization.k8s.io/ClusterRoleBinding me-too is not whitelisted"
    )
    assert _check(projects["bootstrap"], admin, argocd.NAMESPACE) is not None
    for name in ("platform", "fleet-config"):
        assert _check(projects[name], project, argocd.NAMESPACE) is not None
    assert _check(projects["fleet-config"], role_binding, "kube-system") is not None
    assert (
        _check(projects["fleet-config"], {**role_binding, "kind": "Namespace"}, "") is not None
    )  # not meridian-images
    assert refusal(projects["fleet-config"], "", "Namespace", argocd.IMAGES_NAMESPACE, "") is None


def test_refusal_mirrors_argo_cd() -> None:
    assert refusal({}, "apps", "Deployment", "d", "ns") == "namespace ns is not a destination"
    open_ns = {"destinations": [{"server": argocd.IN_CLUSTER, "namespace": "team-*"}]}
    assert refusal(open_ns, "apps", "Deployment", "d", "team-a") is None  # no namespaced whitelist: all kinds
    assert refusal(open_ns, "apps", "Deployment", "d", "other") == "namespace other is not a destination"
    empty = {**open_ns, "namespaceResourceWhitelist": []}
    assert refusal(empty, "apps", "Deployment", "d", "team-a") == "namespaced apps/Deployment d is not whitelisted"
    assert refusal(open_ns, "", "Namespace", "n", "") == "cluster-scoped core/Namespace n is not whitelisted"
    wild = {**open_ns, "clusterResourceWhitelist": [{"group": "*", "kind": "*"}]}
    assert refusal(wild, "rbac.authorization.k8s.io", "ClusterRole", "r", "") is None
    black = {**wild, "clusterResourceBlacklist": [{"group": "rbac.authorization.k8s.io", "kind": "Cluster*"}]}
    assert refusal(black, "rbac.authorization.k8s.io", "ClusterRole", "r", "") is not None
    named = {"clusterResourceWhitelist": [{"group": "", "kind": "Namespace", "name": "team-*"}]}
    assert refusal(named, "", "Namespace", "team-a", "") is None
    assert refusal(named, "", "Namespace", "kube-public", "") is not None
    assert refusal(open_ns, "", "ConfigMap", "c", "team-a", server="https://elsewhere") is not None
