"""Warden's sweep namespace (contract.names.SWEEP_NAMESPACE) as Argo CD would apply every cluster's tree.

Kueue v0.19.2 ignores a Job in a namespace its managedJobsNamespaceSelector does not select, queue name or
not (`pkg/controller/jobframework/reconciler.go` `ReconcileGenericJob`, "Namespace not opted in"; upstream
e2e test/e2e/sequential/baseline/reconcile_test.go "should not reconcile a job in the default (unmanaged)
namespace"), so Warden's sweeps run in a namespace Kueue manages, apart from Warden's own pods. It is not a
team's: no team label, so no tenancy policy, quota or team binding; only Warden writes Jobs there, and no
tenant may write a Namespace, so none can put the Kueue label (or any other) on one.
"""

from __future__ import annotations

import pytest
import yaml

from fleet import names
from fleet.controllers.kueue import selects
from fleet.gitops import admission, operators
from fleet.gitops.check import ClusterTree
from fleet.gitops.validate import Finding
from fleet.model import Fleet
from tests.tenancy.conftest import Policies
from tests.tenancy.rbac import Access, Obj, User, allowed

Trees = dict[str, tuple[ClusterTree, list[Finding]]]
SWEEPS = names.SWEEP_NAMESPACE
WARDEN = User(f"system:serviceaccount:{names.WARDEN_NAMESPACE}:{names.WARDEN_KSA}")


def _objects(tree: ClusterTree) -> list[Obj]:
    return [o for _, o in tree.objects()]


def _selector(tree: ClusterTree) -> Obj:
    """managedJobsNamespaceSelector of the manager Configuration the `kueue` Application ships."""
    (app,) = [o for o in tree.argocd if o.get("kind") == "Application" and o["metadata"]["name"] == "kueue"]
    values = app["spec"]["source"]["helm"]["valuesObject"]
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    selector: Obj = config["managedJobsNamespaceSelector"]
    return selector


def _labels(namespace: Obj) -> dict[str, str]:
    name = namespace["metadata"]["name"]
    return {**(namespace["metadata"].get("labels") or {}), "kubernetes.io/metadata.name": name}


def test_kueue_manages_the_team_namespaces_and_the_sweeps_and_nothing_else(
    fleet: Fleet, trees: Trees, cluster_namespaces: dict[str, dict[str, Obj]]
) -> None:
    expected = {names.team_namespace(t.name) for t in fleet.teams} | {SWEEPS}
    for region, (tree, _) in trees.items():
        selector = _selector(tree)
        managed = {n for n, o in cluster_namespaces[region].items() if selects(selector, _labels(o))}
        assert managed == expected, region
        # Namespaces no manifest creates (API server, GKE, upstream charts) carry no Meridian label.
        for namespace in ("default", "kube-system", "kueue-system", "ray-system", "argocd", "gmp-system"):
            assert not selects(selector, {"kubernetes.io/metadata.name": namespace}), (region, namespace)


def test_the_sweep_namespace_is_no_teams_and_admits_the_sweep_pod(
    trees: Trees, cluster_policies: dict[str, Policies], cluster_namespaces: dict[str, dict[str, Obj]]
) -> None:
    for region, (tree, _) in trees.items():
        labels = _labels(cluster_namespaces[region][SWEEPS])
        assert names.TEAM_LABEL not in labels, region
        # The check mounts the host's NVIDIA driver (warden.deepcheck.sweep_job): baseline would refuse it.
        assert labels["pod-security.kubernetes.io/enforce"] == "privileged", region
        for name, (_, bindings) in cluster_policies[region].items():
            if name in (admission.AGENT_NODE, operators.SYNC_GUARD):
                continue  # cluster-wide, for the node agent's or the operators' own requests only (matchConditions)
            for binding in bindings:
                selector = binding["spec"].get("matchResources", {}).get("namespaceSelector")
                assert selector is not None, (region, name)  # a binding without one binds everywhere
                assert not selects(selector, labels), (region, name)
        there = [o for o in _objects(tree) if o["metadata"].get("namespace") == SWEEPS]
        assert not [o for o in there if o["kind"] in ("ResourceQuota", "LimitRange")], region  # no team quota
        (deny,) = [o for o in there if o["kind"] == "NetworkPolicy"]
        # The check dials nothing and serves nothing: no peers, no metrics port, no API token.
        assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}, region


@pytest.mark.parametrize(
    ("access", "warden_may"),
    [
        (Access("list", "batch", "jobs", SWEEPS), True),
        (Access("create", "batch", "jobs", SWEEPS), True),
        (Access("delete", "batch", "jobs", SWEEPS, "warden-sweep-0"), True),
        (Access("list", "", "pods", SWEEPS), True),  # a failed check's termination messages
        (Access("patch", "batch", "jobs", SWEEPS, "warden-sweep-0"), False),
        (Access("create", "", "pods", SWEEPS), False),
        (Access("list", "batch", "jobs", names.WARDEN_NAMESPACE), False),  # its sweeps are no longer there
        (Access("create", "batch", "jobs", names.WARDEN_NAMESPACE), True),  # probation and burn-in
    ],
)
def test_warden_has_what_its_sweeps_need_there(trees: Trees, access: Access, warden_may: bool) -> None:
    for region, (tree, _) in trees.items():
        assert allowed(_objects(tree), WARDEN, access) is warden_may, region


def test_no_tenant_may_write_a_namespace_or_run_in_the_sweeps(fleet: Fleet, trees: Trees) -> None:
    tenants = [User(f"someone@{t.name}", ("system:authenticated", t.group)) for t in fleet.teams]
    for t in fleet.teams:
        account = f"system:serviceaccount:{names.team_namespace(t.name)}:{names.TRAINER_KSA}"
        tenants.append(User(account, ("system:authenticated", "system:serviceaccounts")))
    refused = [
        *(Access(verb, "", "namespaces", name=SWEEPS) for verb in ("update", "patch", "delete")),
        Access("create", "", "namespaces"),
        *(Access("create", group, kind, SWEEPS) for group, kind in (("batch", "jobs"), ("", "pods"))),
        Access("create", "kueue.x-k8s.io", "localqueues", SWEEPS),
    ]
    for region, (tree, _) in trees.items():
        objects = _objects(tree)
        for user in tenants:
            for access in refused:
                assert not allowed(objects, user, access), (region, user.name, access)
