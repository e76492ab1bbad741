"""Kueue configuration: flavors per pool, a queue per team in one cohort, quota split over pools."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from fleet.gitops.kueue import kueue_objects, split_quota
from fleet.gitops.tree import render_tree
from fleet.model import Fleet
from tests.conftest import SHIPPED_SPEC


def _kueue_docs(fleet: Fleet, cluster: str) -> list[dict[str, Any]]:
    text = render_tree(fleet)[f"kustomize/overlays/{cluster}/kueue-config/kueue-config.yaml"]
    return [d for d in yaml.safe_load_all(text) if d]


def test_changing_a_team_quota_changes_exactly_its_cluster_queue(fleet: Fleet) -> None:
    spec = copy.deepcopy(SHIPPED_SPEC)
    spec["teams"][1]["quota"]["us-east4"] = 512  # research: 768 -> 512
    changed = Fleet.model_validate(spec)
    before = render_tree(fleet)
    after = render_tree(changed)
    assert [p for p in before if before[p] != after[p]] == [
        "kustomize/overlays/meridian-us-east4/kueue-config/kueue-config.yaml"
    ]
    old, new = _kueue_docs(fleet, "meridian-us-east4"), _kueue_docs(changed, "meridian-us-east4")
    differing = [(a, b) for a, b in zip(old, new, strict=True) if a != b]
    assert len(differing) == 1
    a, b = differing[0]
    assert (b["kind"], b["metadata"]["name"]) == ("ClusterQueue", "research")
    (flavor,) = b["spec"]["resourceGroups"][0]["flavors"]
    assert flavor["name"] == "h200-a"
    assert flavor["resources"] == [
        {"name": "nvidia.com/gpu", "nominalQuota": 512},
        {"name": "cpu", "nominalQuota": 512 * 224 // 8},
        {"name": "memory", "nominalQuota": f"{512 * 2952 // 8}Gi"},
    ]
    assert a["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == 768


def test_quota_split_over_pools(fleet: Fleet) -> None:
    central, _, europe = fleet.regions
    pretraining, research, _ = fleet.teams
    # Shared pools 3,072 + 1,024 GPUs: 2,560 splits 3:1, in whole nodes.
    assert split_quota(central, pretraining) == {"h200-a": 1920, "h200-flex": 640}
    assert split_quota(central, research) == {"h200-a": 768, "h200-flex": 256}
    # Europe: h200-a is dedicated to pretraining, which takes it first; others see only the shared spot pool.
    assert split_quota(europe, pretraining) == {"h200-a": 2048, "h200-spot": 0}
    assert split_quota(europe, research) == {"h200-spot": 768}


def test_split_always_adds_up_to_the_quota(fleet: Fleet) -> None:
    for region in fleet.regions:
        for team in fleet.teams:
            for quota in (0, 1, 7, 8, 9, 100, 1001, team.quota.get(region.name, 0)):
                probe = team.model_copy(update={"quota": {region.name: quota}})
                assert sum(split_quota(region, probe).values()) == quota


def test_queues_share_one_cohort_and_flex_pools_use_provisioning(fleet: Fleet) -> None:
    docs = kueue_objects(fleet, fleet.regions[0])
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    assert {q["spec"]["cohortName"] for q in by_kind["ClusterQueue"]} == {"meridian"}
    assert [q["metadata"]["name"] for q in by_kind["ClusterQueue"]] == ["pretraining", "research", "evals"]
    assert {q["spec"]["preemption"]["reclaimWithinCohort"] for q in by_kind["ClusterQueue"]} == {"Any"}
    for queue in by_kind["ClusterQueue"]:
        assert queue["spec"]["admissionChecksStrategy"] == {
            "admissionChecks": [{"name": "dws-prov", "onFlavors": ["h200-flex"]}]
        }
    (config,) = by_kind["ProvisioningRequestConfig"]
    assert config["spec"]["provisioningClassName"] == "queued-provisioning.gke.io"
    flex = next(f for f in by_kind["ResourceFlavor"] if f["metadata"]["name"] == "h200-flex")
    assert {t["key"] for t in flex["spec"]["tolerations"]} == {"nvidia.com/gpu", "cloud.google.com/gke-queued"}
    assert flex["spec"]["nodeLabels"] == {"cloud.google.com/gke-nodepool": "h200-flex"}
    (topology,) = by_kind["Topology"]
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
    ]
    assert {(q["metadata"]["namespace"], q["spec"]["clusterQueue"]) for q in by_kind["LocalQueue"]} == {
        ("team-pretraining", "pretraining"),
        ("team-research", "research"),
        ("team-evals", "evals"),
    }


def test_regions_without_flex_pools_have_no_admission_check(fleet: Fleet) -> None:
    docs = kueue_objects(fleet, fleet.regions[1])
    assert not [d for d in docs if d["kind"] in ("AdmissionCheck", "ProvisioningRequestConfig")]
    assert all("admissionChecksStrategy" not in d["spec"] for d in docs if d["kind"] == "ClusterQueue")
