"""Tenancy in Kueue: every workload in a team namespace goes through Kueue, within a ceiling the namespace enforces too."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from fleet import names
from fleet.gitops import argocd, kueue
from fleet.gitops.check import ClusterTree
from fleet.gitops.teams import DEFAULT_REQUESTS, RESEARCHER_ROLE, quota_hard
from fleet.gitops.validate import Finding
from fleet.model import Fleet
from fleet.objectquota import LIGHTHOUSES_PER_TEAM
from tests.conftest import SHIPPED_SPEC
from tests.gitops.conftest import quota_plan
from tests.tenancy.vap import selects

GPU = names.GPU_RESOURCE


def _manager_config(fleet: Fleet) -> dict[str, Any]:
    kueue_app = next(a for a in argocd.cluster_apps(fleet, fleet.regions[0]) if a.name == "kueue")
    return dict(
        yaml.safe_load(kueue_app.source["helm"]["valuesObject"]["managerConfig"]["controllerManagerConfigYaml"])
    )


def _namespace_labels(tree: ClusterTree) -> dict[str, dict[str, str]]:
    """Every namespace the cluster has, with its labels (the API server adds kubernetes.io/metadata.name)."""
    found: dict[str, dict[str, str]] = {ns: {} for ns in ("default", "kube-system", "kube-public", argocd.NAMESPACE)}
    for objects in tree.apps.values():
        for o in objects:
            if o["kind"] == "Namespace":
                found[o["metadata"]["name"]] = dict(o["metadata"].get("labels", {}))
    for ns in ("kueue-system", "ray-system"):  # created by their applications (CreateNamespace=true)
        found.setdefault(ns, {})
    return {ns: {**labels, "kubernetes.io/metadata.name": ns} for ns, labels in found.items()}


def test_jobs_without_a_queue_name_are_managed_in_team_namespaces_and_wardens_sweeps_only(
    fleet: Fleet, trees: dict[str, tuple[ClusterTree, list[Finding]]]
) -> None:
    config = _manager_config(fleet)
    assert config["manageJobsWithoutQueueName"] is True
    # Everything gkr renders, and bare pods (kubectl run), is an integration Kueue manages.
    assert {"batch/job", "ray.io/rayjob", "ray.io/raycluster", "pod"} <= set(config["integrations"]["frameworks"])
    selector = config["managedJobsNamespaceSelector"]
    team_namespaces = {names.team_namespace(t.name) for t in fleet.teams}
    for tree, _ in trees.values():
        namespaces = _namespace_labels(tree)
        assert team_namespaces <= set(namespaces)
        managed = {ns for ns, labels in namespaces.items() if selects(selector, labels)}
        # Not Warden's own pods, kube-system (the NCCL installer) or Kueue itself; Warden's sweeps, which
        # Kueue would otherwise ignore, queue name or not (fleet.gitops.kueue).
        assert managed == team_namespaces | {names.SWEEP_NAMESPACE}


def _queues(fleet: Fleet, region_index: int) -> dict[str, dict[str, Any]]:
    docs = kueue.kueue_objects(fleet, fleet.regions[region_index], quota_plan(fleet))
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterQueue"}


def _amount(value: int | str) -> int:
    return int(str(value).removesuffix("Gi"))


def _ceiling(queue: dict[str, Any]) -> dict[str, int]:
    """What Kueue may admit for the queue: nominal + borrowingLimit, over every flavor."""
    total: dict[str, int] = {}
    for group in queue["spec"]["resourceGroups"]:
        for flavor in group["flavors"]:
            for r in flavor["resources"]:
                total[r["name"]] = total.get(r["name"], 0) + _amount(r["nominalQuota"]) + _amount(r["borrowingLimit"])
    return total


def test_every_resource_of_every_flavor_has_an_explicit_borrowing_limit(fleet: Fleet) -> None:
    for index, _ in enumerate(fleet.regions):
        for queue in _queues(fleet, index).values():
            for flavor in queue["spec"]["resourceGroups"][0]["flavors"]:
                assert all("borrowingLimit" in r for r in flavor["resources"]), (queue["metadata"]["name"], flavor)


def test_a_team_borrows_at_most_what_the_others_hold_in_a_flavor(fleet: Fleet) -> None:
    for index, region in enumerate(fleet.regions):
        queues = _queues(fleet, index)
        # (flavor, resource) -> nominal over the cohort: nothing else exists to borrow.
        cohort: dict[tuple[str, str], int] = {}
        for queue in queues.values():
            for flavor in queue["spec"]["resourceGroups"][0]["flavors"]:
                for r in flavor["resources"]:
                    key = (flavor["name"], r["name"])
                    cohort[key] = cohort.get(key, 0) + _amount(r["nominalQuota"])
        for queue in queues.values():
            for flavor in queue["spec"]["resourceGroups"][0]["flavors"]:
                for r in flavor["resources"]:
                    own, limit = _amount(r["nominalQuota"]), _amount(r["borrowingLimit"])
                    assert own + limit == cohort[(flavor["name"], r["name"])], (region.name, flavor["name"], r)
        # The quotas fill the pools, so a team can grow into the whole of every pool it may use.
        for pool in region.gpu_pools:
            users = [
                q
                for q in queues.values()
                if any(f["name"] == pool.name for f in q["spec"]["resourceGroups"][0]["flavors"])
            ]
            assert cohort[(pool.name, GPU)] == pool.nodes * pool.machine.gpus, (region.name, pool.name, users)


def test_the_namespace_quota_is_exactly_what_kueue_may_admit(
    fleet: Fleet, trees: dict[str, tuple[ClusterTree, list[Finding]]]
) -> None:
    for index, region in enumerate(fleet.regions):
        queues = _queues(fleet, index)
        tree, _ = trees[region.name]
        quotas = {
            o["metadata"]["namespace"]: o["spec"]["hard"]
            for o in tree.apps["teams"]
            if o["kind"] == "ResourceQuota" and o["metadata"]["name"] == "team-limits"
        }
        for team in fleet.teams:
            ceiling = _ceiling(queues[team.name])
            hard = quotas[names.team_namespace(team.name)]
            assert int(hard[f"requests.{GPU}"]) == ceiling[GPU]
            assert int(hard["requests.cpu"]) == ceiling["cpu"]
            assert _amount(hard["requests.memory"]) == ceiling["memory"]
            # Only runs' Lighthouses (internal load balancers, the admission policy sees to that), each one node port.
            lighthouses = str(LIGHTHOUSES_PER_TEAM)
            assert (hard["services.loadbalancers"], hard["services.nodeports"]) == (lighthouses, lighthouses)
    # Europe: h200-a is pretraining's alone; the others reach only the shared spot pool.
    europe = fleet.regions[2]
    assert [int(quota_hard(quota_plan(fleet).team(europe.name, t.name))[f"requests.{GPU}"]) for t in fleet.teams] == [
        2048 + 1024,
        1024,
        1024,
    ]


def test_containers_without_requests_get_defaults_so_the_quota_admits_them(
    trees: dict[str, tuple[ClusterTree, list[Finding]]], fleet: Fleet
) -> None:
    # A quota on requests.cpu/memory refuses a container that declares none (gkr's preflight init
    # container, GKE's gcsfuse sidecar): the LimitRange gives them a request, which Kueue counts too.
    for tree, _ in trees.values():
        ranges = {o["metadata"]["namespace"]: o["spec"] for o in tree.apps["teams"] if o["kind"] == "LimitRange"}
        for team in fleet.teams:
            (limit,) = ranges[names.team_namespace(team.name)]["limits"]
            assert limit == {"type": "Container", "defaultRequest": DEFAULT_REQUESTS}


def test_a_quota_change_keeps_every_ceiling_at_what_kueue_can_lend(fleet: Fleet) -> None:
    spec = copy.deepcopy(SHIPPED_SPEC)
    spec["teams"][1]["quota"]["us-east4"] = 512  # research: 768 -> 512; 256 GPUs are no team's now
    changed = Fleet.model_validate(spec)
    east4 = fleet.regions[1]
    before = {t.name: quota_hard(quota_plan(fleet).team(east4.name, t.name))[f"requests.{GPU}"] for t in fleet.teams}
    after = {t.name: quota_hard(quota_plan(changed).team("us-east4", t.name))[f"requests.{GPU}"] for t in changed.teams}
    assert before == {"pretraining": "3072", "research": "3072", "evals": "3072"}
    # The 256 GPUs no team holds are the cohort's own quota, lent to every team (issue 31): every ceiling stays
    # the region's GPUs, as Kueue can still admit onto all of them.
    assert after == {"pretraining": "3072", "research": "3072", "evals": "3072"}


def test_teams_cannot_touch_queues_quotas_or_rbac(trees: dict[str, tuple[ClusterTree, list[Finding]]]) -> None:
    tree, _ = next(iter(trees.values()))
    role = next(
        o for o in tree.apps["teams"] if o["kind"] == "ClusterRole" and o["metadata"]["name"] == RESEARCHER_ROLE
    )
    writes = {"create", "update", "patch", "delete", "deletecollection", "*"}
    for rule in role["rules"]:
        if set(rule["verbs"]) & writes:
            assert not set(rule["resources"]) & {"localqueues", "clusterqueues", "resourcequotas", "limitranges", "*"}
            assert not set(rule["apiGroups"]) & {"kueue.x-k8s.io", "rbac.authorization.k8s.io", "*"}


def test_a_cluster_queue_serves_only_its_team_namespace(
    fleet: Fleet, trees: dict[str, tuple[ClusterTree, list[Finding]]]
) -> None:
    for region in fleet.regions:
        tree, _ = trees[region.name]
        namespaces = _namespace_labels(tree)
        for queue in (o for o in tree.apps["kueue-config"] if o["kind"] == "ClusterQueue"):
            selected = {ns for ns, labels in namespaces.items() if selects(queue["spec"]["namespaceSelector"], labels)}
            team = queue["metadata"]["name"] != names.SWEEP_QUEUE  # Warden's sweeps: their namespace only
            assert selected == ({names.team_namespace(queue["metadata"]["name"])} if team else {names.SWEEP_NAMESPACE})
        # Each team's LocalQueue sits in its own namespace and points at its own ClusterQueue.
        for local in (o for o in tree.apps["kueue-config"] if o["kind"] == "LocalQueue"):
            assert local["metadata"]["namespace"] == names.team_namespace(local["spec"]["clusterQueue"])
