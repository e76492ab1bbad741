"""Kueue configuration: flavors per pool, a queue per team in one cohort, quota split over pools."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from fleet.capacity import cpu_pool_capacity
from fleet.gitops.kueue import kueue_objects, sweep_local_queue
from fleet.gitops.validate import CrdSchemas, validate_object
from fleet.model import Fleet
from fleet.quotaplan import apportion
from tests.conftest import SHIPPED_SPEC
from tests.gitops.conftest import quota_plan, render


def _kueue_docs(fleet: Fleet, cluster: str) -> list[dict[str, Any]]:
    text = render(fleet)[f"kustomize/overlays/{cluster}/kueue-config/kueue-config.yaml"]
    return [d for d in yaml.safe_load_all(text) if d]


def test_changing_a_team_quota_changes_only_its_gpu_quota_and_the_cpu_split(fleet: Fleet) -> None:
    spec = copy.deepcopy(SHIPPED_SPEC)
    spec["teams"][1]["quota"]["us-east4"] = 512  # research: 768 -> 512
    changed = Fleet.model_validate(spec)
    before = render(fleet)
    after = render(changed)
    # The namespaces' ResourceQuotas follow what Kueue may admit, which stays the region's capacity as the GPUs
    # research gives up are lent through the cohort (tests/gitops/test_quota.py); the registry, in generated/
    # and in every cluster, carries the team's quota for gkr.
    assert [p for p in before if before[p] != after[p]] == [
        "generated/registry.json",
        "kustomize/overlays/meridian-europe-west1/registry/registry.yaml",
        "kustomize/overlays/meridian-us-central1/registry/registry.yaml",
        "kustomize/overlays/meridian-us-east4/kueue-config/kueue-config.yaml",
        "kustomize/overlays/meridian-us-east4/registry/registry.yaml",
    ]
    old, new = _kueue_docs(fleet, "meridian-us-east4"), _kueue_docs(changed, "meridian-us-east4")
    differing = [(a, b) for a, b in zip(old, new, strict=True) if a != b]
    # The CPU pool follows the GPU quotas, so every queue's share of it moves; GPU quota only in research's.
    # Warden's sweep queue may borrow what the teams and the cohort hold: the pool, which does not move.
    # The 256 GPUs research gives up are no team's: the cohort's own quota, lent to every queue (issue 31).
    assert {b["metadata"]["name"] for _, b in differing} == {
        "meridian",
        "pretraining",
        "research",
        "evals",
    }
    (cohort,) = [b for _, b in differing if b["kind"] == "Cohort"]
    assert cohort["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0] == {
        "name": "nvidia.com/gpu",
        "nominalQuota": 256,
    }
    differing = [(a, b) for a, b in differing if b["kind"] != "Cohort"]
    # Every queue's borrowing limits follow the others' nominal quota.
    for a, b in differing:
        assert b["kind"] == "ClusterQueue"
        old_gpu = [_nominal(f) for f in a["spec"]["resourceGroups"][0]["flavors"] if f["name"] != "cpu"]
        new_gpu = [_nominal(f) for f in b["spec"]["resourceGroups"][0]["flavors"] if f["name"] != "cpu"]
        assert (old_gpu != new_gpu) == (b["metadata"]["name"] == "research")
    research = next(b for _, b in differing if b["metadata"]["name"] == "research")
    flavor = next(f for f in research["spec"]["resourceGroups"][0]["flavors"] if f["name"] == "h200-a")
    # It may borrow what pretraining and evals hold in the pool and the cohort's own: 2,048 + 256 + 256 GPUs.
    assert flavor["resources"] == [
        {"name": "nvidia.com/gpu", "nominalQuota": 512, "borrowingLimit": 2560},
        {"name": "cpu", "nominalQuota": 512 * 224 // 8, "borrowingLimit": 2560 * 224 // 8},
        {"name": "memory", "nominalQuota": f"{512 * 2952 // 8}Gi", "borrowingLimit": f"{2560 * 2952 // 8}Gi"},
    ]
    # 2,048 vCPUs over 2048:512:256.
    assert _flavor_quota(research, "cpu") == {"nvidia.com/gpu": 0, "cpu": 372, "memory": "1489Gi"}


def _nominal(flavor: dict[str, Any]) -> dict[str, Any]:
    return {r["name"]: r["nominalQuota"] for r in flavor["resources"]}


def test_quota_split_over_pools(fleet: Fleet) -> None:
    plan = quota_plan(fleet)
    # Shared pools 3,072 + 1,024 GPUs: 2,560 splits 3:1, in whole nodes.
    assert plan.team("us-central1", "pretraining").pools == {"h200-a": 1920, "h200-flex": 640}
    assert plan.team("us-central1", "research").pools == {"h200-a": 768, "h200-flex": 256}
    # Europe: h200-a is dedicated to pretraining, which takes it first; others see only the shared spot pool.
    assert plan.team("europe-west1", "pretraining").pools == {"h200-a": 2048, "h200-spot": 0}
    assert plan.team("europe-west1", "research").pools == {"h200-spot": 768}


def test_queues_share_one_cohort_and_flex_pools_use_provisioning(fleet: Fleet) -> None:
    docs = kueue_objects(fleet, fleet.regions[0], quota_plan(fleet))
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    assert {q["spec"]["cohortName"] for q in by_kind["ClusterQueue"]} == {"meridian"}
    *teams, sweep = by_kind["ClusterQueue"]
    assert [q["metadata"]["name"] for q in teams] == ["pretraining", "research", "evals"]
    assert {q["spec"]["preemption"]["reclaimWithinCohort"] for q in teams} == {"Any"}
    for queue in teams:
        assert queue["spec"]["admissionChecksStrategy"] == {
            "admissionChecks": [{"name": "dws-prov", "onFlavors": ["h200-flex"]}]
        }
    (config,) = by_kind["ProvisioningRequestConfig"]
    assert config["spec"]["provisioningClassName"] == "queued-provisioning.gke.io"
    flex = next(f for f in by_kind["ResourceFlavor"] if f["metadata"]["name"] == "h200-flex")
    assert {t["key"] for t in flex["spec"]["tolerations"]} == {"nvidia.com/gpu", "cloud.google.com/gke-queued"}
    assert flex["spec"]["nodeLabels"] == {"cloud.google.com/gke-nodepool": "h200-flex"}
    topology, hosts = by_kind["Topology"]  # the GPU flavors', the CPU flavors'
    assert hosts["metadata"]["name"] == "hostname"
    assert topology["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert [level["nodeLabel"] for level in topology["spec"]["levels"]] == [
        "cloud.google.com/gce-topology-block",
        "cloud.google.com/gce-topology-subblock",
        "cloud.google.com/gce-topology-host",
        "kubernetes.io/hostname",
    ]
    assert [(p["metadata"]["name"], p["value"]) for p in by_kind["WorkloadPriorityClass"]] == [
        ("critical", 100000),
        ("high", 10000),
        ("standard", 1000),
        ("preemptible", 100),
        ("warden-sweep", 0),  # Warden's sweeps: below every job
    ]
    assert {(q["metadata"]["namespace"], q["spec"]["clusterQueue"]) for q in by_kind["LocalQueue"]} == {
        ("team-pretraining", "pretraining"),
        ("team-research", "research"),
        ("team-evals", "evals"),
    }
    meta = sweep_local_queue()["metadata"]
    assert (meta["name"], meta["namespace"]) == ("warden-sweep", "warden-sweeps")  # where Kueue manages Jobs
    assert sweep_local_queue()["spec"] == {"clusterQueue": "warden-sweep"}
    # The sweeps borrow only (no quota of their own, so every team reclaims them) and never preempt.
    assert sweep["metadata"]["name"] == "warden-sweep"
    assert sweep["spec"]["cohortName"] == "meridian"
    assert sweep["spec"]["preemption"] == {
        "reclaimWithinCohort": "Never",
        "borrowWithinCohort": {"policy": "Never"},
        "withinClusterQueue": "Never",
    }
    (group,) = sweep["spec"]["resourceGroups"]
    assert [f["name"] for f in group["flavors"]] == ["h200-a"]  # flex-start pools are burned in, not swept
    assert all(r["nominalQuota"] in (0, "0Gi") for r in group["flavors"][0]["resources"])
    assert group["flavors"][0]["resources"][0] == {"name": "nvidia.com/gpu", "nominalQuota": 0, "borrowingLimit": 3072}
    assert "admissionChecksStrategy" not in sweep["spec"]
    (pod_priority,) = by_kind["PriorityClass"]
    assert (pod_priority["value"], pod_priority["preemptionPolicy"]) == (-1000, "Never")


def test_regions_without_flex_pools_have_no_admission_check(fleet: Fleet) -> None:
    docs = kueue_objects(fleet, fleet.regions[1], quota_plan(fleet))
    assert not [d for d in docs if d["kind"] in ("AdmissionCheck", "ProvisioningRequestConfig")]
    assert all("admissionChecksStrategy" not in d["spec"] for d in docs if d["kind"] == "ClusterQueue")


def _cpu_free(fleet: Fleet) -> Fleet:
    spec = copy.deepcopy(SHIPPED_SPEC)
    for region in spec["regions"]:
        region.pop("cpu_pools", None)
    return Fleet.model_validate(spec)


def _by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def _flavor_quota(queue: dict[str, Any], flavor: str) -> dict[str, Any]:
    (group,) = queue["spec"]["resourceGroups"]
    entry = next(f for f in group["flavors"] if f["name"] == flavor)
    return {r["name"]: r["nominalQuota"] for r in entry["resources"]}


def test_a_cpu_flavor_per_cpu_pool_without_the_gpu_toleration(fleet: Fleet) -> None:
    for region in fleet.regions:
        assert region.cpu_pools
        objects = kueue_objects(fleet, region, quota_plan(fleet))
        flavors = _by_kind(objects, "ResourceFlavor")
        for pool in region.cpu_pools:
            # Topology-aware on a Topology of its own, the node alone: CPU nodes have no gce-topology labels.
            assert flavors[pool.name]["spec"] == {
                "nodeLabels": {"cloud.google.com/gke-nodepool": pool.name},
                "topologyName": "hostname",
            }
        assert _by_kind(objects, "Topology")["hostname"]["spec"] == {
            "levels": [{"nodeLabel": "kubernetes.io/hostname"}]
        }


def test_every_queue_is_tas_only_so_a_podset_without_topology_gets_the_h200_flavors(fleet: Fleet) -> None:
    # Kueue v0.19.2 tas_flavorassigner.go isTASImplied / clusterqueue.go isTASOnly (fleet.gitops.kueue docstring).
    for region in fleet.regions:
        objects = kueue_objects(fleet, region, quota_plan(fleet))
        flavors = _by_kind(objects, "ResourceFlavor")
        for queue in _by_kind(objects, "ClusterQueue").values():
            (group,) = queue["spec"]["resourceGroups"]
            assert all(flavors[f["name"]]["spec"].get("topologyName") for f in group["flavors"]), queue["metadata"]


def test_the_feature_gates_meridian_relies_on_are_set_and_fail_fast_is_off() -> None:
    from fleet.gitops.kueue import manager_config

    assert manager_config()["featureGates"] == {
        "TopologyAwareScheduling": True,
        "TASFailedNodeReplacement": True,
        "TASReplaceNodeOnPodTermination": True,
        "TASReplaceNodeDueToNotReadyOverFixedTime": False,
        # On (0.19's default), one failed search for a replacement node evicts the whole gang.
        "TASFailedNodeReplacementFailFast": False,
    }


def test_gpu_flavors_come_reservation_first_then_flex_start_then_spot() -> None:
    # Kueue takes the first flavor that fits for a pod that selects no pool (fleet.gitops.kueue FLAVOR_ORDER),
    # whatever order fleet.yaml lists the pools in.
    spec = copy.deepcopy(SHIPPED_SPEC)
    europe = spec["regions"][2]
    europe["gpu_pools"] = [
        {**europe["gpu_pools"][1], "name": "h200-spot"},
        {
            "name": "h200-flex",
            "machine_type": "a3-ultragpu-8g",
            "zone": "europe-west1-b",
            "nodes": 64,
            "capacity": {"mode": "flex_start"},
        },
        {**europe["gpu_pools"][0], "team": None},
    ]
    for team in spec["teams"]:
        team["quota"]["europe-west1"] = 256
    changed = Fleet.model_validate(spec)
    queues = _by_kind(kueue_objects(changed, changed.regions[2], quota_plan(changed)), "ClusterQueue")
    for name, queue in queues.items():
        (group,) = queue["spec"]["resourceGroups"]
        expected = ["h200-a", "h200-spot"] if name == "warden-sweep" else ["cpu", "h200-a", "h200-flex", "h200-spot"]
        assert [f["name"] for f in group["flavors"]] == expected, name


def test_cpu_quota_adds_up_to_each_cpu_pool(fleet: Fleet) -> None:
    for region in fleet.regions:
        queues = _by_kind(kueue_objects(fleet, region, quota_plan(fleet)), "ClusterQueue")
        queues.pop("warden-sweep")  # no quota of its own
        for pool in region.cpu_pools:
            capacity = cpu_pool_capacity(pool)
            quotas = [_flavor_quota(q, pool.name) for q in queues.values()]
            assert {q["nvidia.com/gpu"] for q in quotas} == {0}  # a GPU pod never fits a CPU flavor
            assert sum(q["cpu"] for q in quotas) == capacity.vcpus
            assert sum(int(q["memory"].removesuffix("Gi")) for q in quotas) == capacity.memory_gb


def test_cpu_quota_follows_gpu_quota(fleet: Fleet) -> None:
    central = fleet.regions[0]
    queues = _by_kind(kueue_objects(fleet, central, quota_plan(fleet)), "ClusterQueue")
    # 64 n2-standard-32: 2,048 vCPUs and 8,192 GB split 2560:1024:512.
    assert [_flavor_quota(queues[t], "cpu") for t in ("pretraining", "research", "evals")] == [
        {"nvidia.com/gpu": 0, "cpu": 1280, "memory": "5120Gi"},
        {"nvidia.com/gpu": 0, "cpu": 512, "memory": "2048Gi"},
        {"nvidia.com/gpu": 0, "cpu": 256, "memory": "1024Gi"},
    ]


def test_cpu_split_adds_up_for_any_quotas() -> None:
    assert apportion(2048, [3, 3, 3]) == [683, 683, 682]
    assert apportion(10, [0, 0]) == [5, 5]  # no GPU quota anywhere: an even split
    assert apportion(7, [1, 0, 0]) == [7, 0, 0]
    for total in (0, 1, 31, 2048, 8191):
        for weights in ([1], [5, 1], [2560, 1024, 512], [1, 1, 1, 1, 1, 1, 1]):
            shares = apportion(total, weights)
            assert sum(shares) == total
            assert all(s >= 0 for s in shares)


def test_gpu_flavors_are_unchanged_by_cpu_pools(fleet: Fleet) -> None:
    before = _cpu_free(fleet)
    for region, plain in zip(fleet.regions, before.regions, strict=True):
        old = _by_kind(kueue_objects(before, plain, quota_plan(before)), "ClusterQueue")
        new = _by_kind(kueue_objects(fleet, region, quota_plan(fleet)), "ClusterQueue")
        cpu = {p.name for p in region.cpu_pools}
        for name, queue in new.items():
            if name == "warden-sweep":
                continue  # GPU flavors only, no quota
            (group,) = queue["spec"]["resourceGroups"]
            (old_group,) = old[name]["spec"]["resourceGroups"]
            assert [f for f in group["flavors"] if f["name"] not in cpu] == old_group["flavors"]
            # CPU flavors first: a CPU pod with no pool selector lands on the CPU pool, not an H200 flavor.
            assert [f["name"] for f in group["flavors"][: len(cpu)]] == [p.name for p in region.cpu_pools]
            assert group["coveredResources"] == old_group["coveredResources"]


def _selects(node_selector: dict[str, str], flavor: dict[str, Any]) -> bool:
    """Kueue's flavor match: the pod's selector agrees on every node label the flavor names."""
    labels = flavor["spec"].get("nodeLabels", {})
    return all(node_selector[k] == v for k, v in labels.items() if k in node_selector)


def test_cpu_pods_can_only_get_the_cpu_flavor(fleet: Fleet) -> None:
    for region in fleet.regions:
        flavors = _by_kind(kueue_objects(fleet, region, quota_plan(fleet)), "ResourceFlavor")
        for pool in region.cpu_pools:
            head = {"cloud.google.com/gke-nodepool": pool.name}  # what gkr sets on CPU pods
            assert [n for n, f in flavors.items() if _selects(head, f)] == [pool.name]


def test_every_cluster_queue_validates_against_the_pinned_crd(fleet: Fleet, crds: CrdSchemas) -> None:
    for region in fleet.regions:
        for queue in _by_kind(kueue_objects(fleet, region, quota_plan(fleet)), "ClusterQueue").values():
            assert validate_object(queue, fleet.versions.kubernetes, crds) == []
