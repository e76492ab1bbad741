"""Object-count quotas in every team namespace (issue 39, item 4), sized from the fleet.

The attack: one researcher of team research, with kubectl in team-research, created ~4,090 ClusterIP
Services and filled the cluster's /20 Service range; every Lighthouse and platform Service after that got
no address. Secrets, ConfigMaps and Events were unbounded too. These tests read the team namespaces as
the renderer makes them (fleet.gitops.teams), so they hold before the committed tree is regenerated.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from contract.problem import Invalid
from fleet.gitops.teams import team_objects
from fleet.load import load_text
from fleet.model import Fleet
from tests.conftest import SHIPPED_SPEC
from tests.gitops.conftest import loaded

COUNTED = (
    "pods",
    "services",
    "services.loadbalancers",
    "services.nodeports",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    # Core Events: the quota admission plugin charges a create to count/<resource>[.<group>] of the
    # request's own group (k8s.io/apiserver .../plugin/resourcequota/controller.go, quotaEvaluator.Evaluate):
    # /api/v1 Events are count/events, events.k8s.io/v1 ones count/events.events.k8s.io.
    "count/events",
    "count/events.events.k8s.io",
    # The workload kinds a team writes, custom resources as count/<resource>.<group> too.
    "count/jobs.batch",
    "count/rayjobs.ray.io",
    "count/rayclusters.ray.io",
    "count/deployments.apps",
)


def _hard(fleet: Fleet) -> dict[tuple[str, str], dict[str, str]]:
    """(region, team) -> the team namespace's ResourceQuota `hard`, as the renderer makes it."""
    plans = loaded(fleet)
    out = {}
    for region in fleet.regions:
        for o in team_objects(plans, region):
            if o["kind"] == "ResourceQuota" and o["metadata"]["name"] == "team-limits":
                team = o["metadata"]["namespace"].removeprefix("team-")
                out[(region.name, team)] = o["spec"]["hard"]
    return out


def _spec(edit: Any = None) -> Fleet:
    spec = copy.deepcopy(SHIPPED_SPEC)
    if edit is not None:
        edit(spec)
    return Fleet.model_validate(spec)


def test_every_team_namespace_counts_its_objects(fleet: Fleet) -> None:
    hard = _hard(fleet)
    assert set(hard) == {(r.name, t.name) for r in fleet.regions for t in fleet.teams}
    for where, quota in hard.items():
        missing = [key for key in COUNTED if key not in quota]
        assert not missing, (where, missing)
        assert all(int(quota[key]) >= 0 for key in COUNTED), (where, quota)


def test_the_teams_services_leave_the_platform_its_share_of_the_service_range(fleet: Fleet) -> None:
    # The attack: research alone could take 4,090 of the /20's addresses. Now every team together stays
    # below what the range hands out, with room left for the platform's own Services.
    plans = loaded(fleet)
    hard = _hard(fleet)
    for ranges in plans.addresses.regions:
        usable = ranges.services.cidr.num_addresses - 2  # the network and broadcast addresses are never given
        teams = sum(int(hard[(ranges.region, t.name)]["services"]) for t in fleet.teams)
        assert teams <= usable - 256, (ranges.region, teams, usable)
        assert int(hard[(ranges.region, "research")]["services"]) < 4090 // 2


def test_the_counts_move_with_the_fleet() -> None:
    before = _hard(_spec())

    def narrower(spec: dict[str, Any]) -> None:
        spec["network"]["service_prefix"] = 21  # half the Service range

    def fourth_team(spec: dict[str, Any]) -> None:
        spec["teams"].append({"name": "safety", "group": "safety@meridian.example.com", "priority": "standard"})

    def more_cpu(spec: dict[str, Any]) -> None:
        spec["regions"][0]["cpu_pools"][0]["max_nodes"] = 32  # half of us-central1's CPU pool

    def more_gpus(spec: dict[str, Any]) -> None:
        spec["regions"][1]["gpu_pools"][0]["nodes"] = 448  # us-east4's h200-a: 384 -> 448 nodes

    central, east = ("us-central1", "research"), ("us-east4", "research")
    assert int(before[central]["services"]) == (4096 - 2 - 256) // 3
    assert int(_hard(_spec(narrower))[central]["services"]) == (2048 - 2 - 256) // 3
    assert int(_hard(_spec(fourth_team))[central]["services"]) == (4096 - 2 - 256) // 4
    # pods: twice what can run, one per GPU Kueue may admit plus one per CPU of the CPU pool; Events 16 each.
    assert int(before[central]["pods"]) == 2 * (512 * 8 + 64 * 32)
    assert int(_hard(_spec(more_cpu))[central]["pods"]) == 2 * (512 * 8 + 32 * 32)
    assert int(_hard(_spec(more_gpus))[east]["pods"]) == 2 * (448 * 8 + 64 * 32)
    assert int(_hard(_spec(more_gpus))[east]["count/events"]) == 16 * (448 * 8 + 64 * 32)
    assert int(_hard(_spec(more_gpus))[east]["count/rayjobs.ray.io"]) == 2 * (448 * 8 + 64 * 32)
    # Secrets: the runs across regions the Lighthouse quota allows (4 homed here, 4 per other region) + 32.
    assert int(before[central]["secrets"]) == 4 * (3 + 1) + 32
    assert int(_hard(_spec(fourth_team))[central]["secrets"]) == int(before[central]["secrets"])


def test_both_event_spellings_hold_the_same_count_and_teams_write_core_events_only(fleet: Fleet) -> None:
    for quota in _hard(fleet).values():
        assert quota["count/events"] == quota["count/events.events.k8s.io"]
    for o in team_objects(loaded(fleet), fleet.regions[0]):
        for rule in o.get("rules", []) if o["kind"] in ("Role", "ClusterRole") else []:
            if "events" in rule["resources"] and set(rule["verbs"]) & {"create", "patch", "update", "*"}:
                assert rule["apiGroups"] == [""], (o["metadata"]["name"], rule)


def test_no_pvcs_and_configmaps_only_for_what_the_cluster_writes(fleet: Fleet) -> None:
    for quota in _hard(fleet).values():
        assert quota["persistentvolumeclaims"] == "0"
        assert 1 <= int(quota["configmaps"]) <= 16  # kube-root-ca.crt, a mesh's root certificate
    role = next(o for o in team_objects(loaded(fleet), fleet.regions[0]) if o["kind"] == "ClusterRole")
    granted = {r for rule in role["rules"] for r in rule["resources"] if set(rule["verbs"]) & {"create", "patch"}}
    assert not granted & {"configmaps", "persistentvolumeclaims"}


def test_a_team_override_replaces_a_derived_count() -> None:
    def capped(spec: dict[str, Any]) -> None:
        spec["teams"][1]["objects"] = {"pods": 256, "secrets": 100, "events": 1000}

    hard = _hard(_spec(capped))
    assert (hard[("us-east4", "research")]["pods"], hard[("us-east4", "research")]["secrets"]) == ("256", "100")
    assert hard[("us-east4", "research")]["count/events.events.k8s.io"] == "1000"
    assert hard[("us-east4", "evals")]["pods"] == _hard(_spec())[("us-east4", "evals")]["pods"]


def test_services_the_range_cannot_hand_out_are_refused(spec: dict[str, Any]) -> None:
    spec["teams"][0]["objects"] = {"services": 3000}  # with research's and evals' 1,279: above the /20
    with pytest.raises(Invalid) as refused:
        load_text(yaml.safe_dump(spec, sort_keys=False))
    lines = [line for line in refused.value.lines if "Services" in line]
    assert len(lines) == 3
    assert "add up to 5,558" in lines[0]
    assert "lower teams[].objects.services" in lines[0]
    spec["teams"][0]["objects"] = {}
    spec["network"]["service_prefix"] = 24  # 254 addresses: the platform's 256 alone do not fit
    with pytest.raises(Invalid) as refused:
        load_text(yaml.safe_dump(spec, sort_keys=False))
    assert any("below 64; widen it (network.service_prefix)" in line for line in refused.value.lines)
    spec["teams"][0]["objects"] = {"servics": 10}
    with pytest.raises(Invalid) as refused:
        load_text(yaml.safe_dump(spec, sort_keys=False))
    assert any("teams[0].objects.servics: unknown field; did you mean services?" in x for x in refused.value.lines)
