"""Assertions on the synthesized stacks of the shipped fleet, region by region."""

from __future__ import annotations

import itertools
from collections import Counter
from ipaddress import IPv4Network
from typing import Any

import pytest

from contract.warden_iam import role_permissions
from fleet import names
from fleet.load import load
from fleet.model import CapacityMode
from fleet.planner import rdma_zones
from meridian_infra.report import Stacks, resources
from tests.conftest import SHIPPED

FLEET = load(SHIPPED).fleet
REGIONS = [r.name for r in FLEET.regions]


def of_type(stack: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return dict(stack.get("resource", {}).get(kind, {}))


def test_one_stack_per_region_plus_global(stacks: Stacks) -> None:
    assert list(stacks) == ["global", *REGIONS]


@pytest.mark.parametrize("region", FLEET.regions, ids=REGIONS)
def test_region_resource_counts(stacks: Stacks, region: Any) -> None:
    gpu_zones = len(rdma_zones(region))
    counts = Counter(kind for kind, _, _ in resources(stacks[region.name]))
    assert counts == {
        "google_compute_subnetwork": 2 + 8 * gpu_zones,  # cluster, gVNIC, 8 RDMA per GPU zone
        "google_compute_network": gpu_zones,  # one RDMA VPC per GPU zone
        "google_compute_firewall": 6,  # 4 of the region's own, 2 for runs across regions (test_cross_region.py)
        "google_compute_router": 1,
        "google_compute_router_nat": 1,
        "google_container_cluster": 1,
        "google_container_node_pool": 1 + len(region.gpu_pools) + len(region.cpu_pools),
        "google_storage_bucket": 1,
        "google_storage_managed_folder": len(FLEET.teams),  # teams/<team>/ in the checkpoint bucket
        "google_storage_managed_folder_iam_member": len(FLEET.teams),
        "google_project_iam_member": 1,
    }


@pytest.mark.parametrize("region", FLEET.regions, ids=REGIONS)
def test_h200_pools_are_built_as_specified(stacks: Stacks, region: Any) -> None:
    stack = stacks[region.name]
    pools = of_type(stack, "google_container_node_pool")
    subnets = of_type(stack, "google_compute_subnetwork")
    for pool in region.gpu_pools:
        body = pools[f"pool_{pool.name}"]
        node = body["node_config"]
        assert node["machine_type"] == "a3-ultragpu-8g"
        assert node["guest_accelerator"] == [
            {
                "type": "nvidia-h200-141gb",
                "count": 8,
                "gpu_driver_installation_config": {"gpu_driver_version": "LATEST"},
            }
        ]
        assert node["taint"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}]
        assert node["labels"] == {names.POOL_LABEL: pool.name, names.TEAM_LABEL: pool.team or "shared"}
        assert node["gvnic"] == {"enabled": True}
        assert node["workload_metadata_config"] == {"mode": "GKE_METADATA"}
        assert node["ephemeral_storage_local_ssd_config"] == {"local_ssd_count": 32}
        assert body["node_locations"] == [pool.zone]
        assert body["management"]["auto_upgrade"] is True  # release channel; exclusions hold upgrades

        nics = body["network_config"]["additional_node_network_configs"]
        assert len(nics) == 9
        assert nics[0]["subnetwork"] == "${google_compute_subnetwork.gvnic_subnet.name}"
        rdma = [n["subnetwork"] for n in nics[1:]]
        assert rdma == [f"${{google_compute_subnetwork.rdma_{pool.zone}_{i}.name}}" for i in range(8)]
        assert all(f"rdma_{pool.zone}_{i}" in subnets for i in range(8))

        mode = pool.capacity.mode
        affinity = node["reservation_affinity"]
        if mode is CapacityMode.RESERVATION:
            expected = pool.capacity.reservation + (
                f"/reservationBlocks/{pool.capacity.block}" if pool.capacity.block else ""
            )
            assert affinity == {
                "consume_reservation_type": "SPECIFIC_RESERVATION",
                "key": "compute.googleapis.com/reservation-name",
                "values": [expected],
            }
            assert body["node_count"] == pool.nodes
            assert "placement_policy" not in body
        else:
            assert affinity == {"consume_reservation_type": "NO_RESERVATION"}
        if mode is CapacityMode.FLEX_START:
            assert body["queued_provisioning"] == {"enabled": True}
            assert body["autoscaling"] == {
                "total_min_node_count": 0,
                "total_max_node_count": pool.nodes,
                "location_policy": "ANY",
            }
            assert body["management"]["auto_repair"] is False
            assert "node_count" not in body
            assert "placement_policy" not in body
        else:
            assert "queued_provisioning" not in body
            assert body["management"]["auto_repair"] is True
        if mode is CapacityMode.SPOT:
            assert node["spot"] is True
            assert body["placement_policy"] == {"type": "COMPACT"}
            assert body["node_count"] == pool.nodes


def test_shipped_fleet_exercises_every_capacity_mode_but_on_demand() -> None:
    modes = {p.capacity.mode for r in FLEET.regions for p in r.gpu_pools}
    assert modes >= {CapacityMode.RESERVATION, CapacityMode.FLEX_START, CapacityMode.SPOT}
    assert any(p.capacity.block for r in FLEET.regions for p in r.gpu_pools)


@pytest.mark.parametrize("region", FLEET.regions, ids=REGIONS)
def test_cluster_settings(stacks: Stacks, region: Any) -> None:
    (cluster,) = of_type(stacks[region.name], "google_container_cluster").values()
    assert cluster["name"] == f"meridian-{region.name}"
    assert cluster["location"] == region.name
    assert cluster["remove_default_node_pool"] is True
    assert cluster["deletion_protection"] is True
    assert cluster["private_cluster_config"]["enable_private_nodes"] is True
    assert cluster["datapath_provider"] == "ADVANCED_DATAPATH"
    assert cluster["enable_multi_networking"] is True
    assert cluster["enable_shielded_nodes"] is True
    assert cluster["workload_identity_config"] == {"workload_pool": "meridian-train-prod.svc.id.goog"}
    assert cluster["addons_config"]["gcs_fuse_csi_driver_config"] == {"enabled": True}
    assert "DCGM" in cluster["monitoring_config"]["enable_components"]
    assert cluster["monitoring_config"]["managed_prometheus"] == {"enabled": True}
    assert cluster["release_channel"] == {"channel": "REGULAR"}
    window = cluster["maintenance_policy"]["recurring_window"]
    assert window["recurrence"] == "FREQ=WEEKLY;BYDAY=SA,SU"
    assert window["start_time"].endswith(f"T{region.cluster.maintenance_window.start_utc}:00Z")
    assert cluster["master_auth"]["client_certificate_config"] == {"issue_client_certificate": False}


def test_cluster_and_gvnic_subnets_have_flow_logs_and_private_google_access(stacks: Stacks) -> None:
    for region in REGIONS:
        subnets = of_type(stacks[region], "google_compute_subnetwork")
        for name in ("subnet", "gvnic_subnet"):
            assert subnets[name]["private_ip_google_access"] is True
            assert subnets[name]["log_config"]["flow_sampling"] > 0


def test_rdma_networks_use_the_zone_roce_profile(stacks: Stacks) -> None:
    network = of_type(stacks["us-central1"], "google_compute_network")["rdma_us-central1-b"]
    assert network["network_profile"] == "projects/meridian-train-prod/global/networkProfiles/us-central1-b-vpc-roce"
    assert network["mtu"] == 8896
    assert network["auto_create_subnetworks"] is False


def _ranges(stacks: Stacks) -> list[tuple[str, IPv4Network]]:
    found = []
    for stack_name, stack in stacks.items():
        for kind, name, body in resources(stack):
            where = f"{stack_name}/{kind}.{name}"
            if kind == "google_compute_subnetwork":
                found.append((where, IPv4Network(body["ip_cidr_range"])))
                found += [
                    (f"{where}/{r['range_name']}", IPv4Network(r["ip_cidr_range"]))
                    for r in body.get("secondary_ip_range", [])
                ]
            elif kind == "google_container_cluster":
                found.append((where, IPv4Network(body["private_cluster_config"]["master_ipv4_cidr_block"])))
    return found


def test_no_overlapping_ranges_in_the_synthesized_json(stacks: Stacks) -> None:
    ranges = _ranges(stacks)
    assert len(ranges) == 3 * (3 + 8 + 1 + 1)  # per region: subnet + 2 secondary, 8 RDMA, gVNIC, control plane
    overlaps = [(a, b) for (a, x), (b, y) in itertools.combinations(ranges, 2) if x.overlaps(y)]
    assert overlaps == []


def test_no_primitive_roles_and_nothing_public(stacks: Stacks) -> None:
    members = []
    for stack in stacks.values():
        for kind, _, body in resources(stack):
            if kind.endswith(("_iam_member", "_iam_binding")):
                assert body["role"] not in {"roles/owner", "roles/editor", "roles/viewer"}
                members.append(body["member"])
    assert members
    assert not [m for m in members if m in {"allUsers", "allAuthenticatedUsers"}]


def test_no_firewall_rule_open_to_the_internet(stacks: Stacks) -> None:
    for region in REGIONS:
        for rule in of_type(stacks[region], "google_compute_firewall").values():
            assert rule["direction"] == "INGRESS"
            assert "0.0.0.0/0" not in rule["source_ranges"]


def test_warden_role_holds_exactly_the_permissions_of_its_calls(stacks: Stacks) -> None:
    """contract.warden_iam maps each Compute call warden.gce makes to its permissions (tests/warden/test_iam.py
    reads the calls); the role is that set, so performMaintenance cannot be refused and nothing unused is granted."""
    (role,) = stacks["global"]["resource"]["google_project_iam_custom_role"].values()
    assert sorted(role["permissions"]) == list(role_permissions())


def test_warden_may_repair_only_its_region(stacks: Stacks) -> None:
    grant = of_type(stacks["us-east4"], "google_project_iam_member")["warden_repair"]
    expression = grant["condition"]["expression"]
    assert "projects/meridian-train-prod/zones/us-east4-b/" in expression
    assert "us-central1" not in expression
    assert grant["role"] == "${data.terraform_remote_state.global_state.outputs.warden_role}"


def test_checkpoint_bucket_expires_only_staged_data(stacks: Stacks) -> None:
    bucket = of_type(stacks["europe-west1"], "google_storage_bucket")["checkpoints"]
    assert bucket["name"] == "meridian-ckpt-europe-west1"
    assert bucket["location"] == "EUROPE-WEST1"
    assert bucket["hierarchical_namespace"] == {"enabled": True}
    assert bucket["uniform_bucket_level_access"] is True
    assert bucket["public_access_prevention"] == "enforced"
    assert "versioning" not in bucket
    (rule,) = bucket["lifecycle_rule"]
    assert rule["action"] == {"type": "Delete"}
    assert rule["condition"]["matches_prefix"] == [f"teams/{t.name}/{names.STAGED_PREFIX}" for t in FLEET.teams]
    assert "google_storage_bucket_iam_member" not in stacks["europe-west1"]["resource"]  # no bucket-wide grant


def test_each_stack_has_its_own_backend_prefix(stacks: Stacks) -> None:
    backends = [stack["terraform"]["backend"]["gcs"] for stack in stacks.values()]
    assert {b["bucket"] for b in backends} == {"meridian-train-prod-tfstate"}
    prefixes = [b["prefix"] for b in backends]
    assert len(set(prefixes)) == len(prefixes) == 4


def test_regions_read_global_values_through_remote_state(stacks: Stacks) -> None:
    for region in REGIONS:
        remote = stacks[region]["data"]["terraform_remote_state"]["global_state"]
        assert remote == {
            "backend": "gcs",
            "config": {"bucket": "meridian-train-prod-tfstate", "prefix": "meridian/global"},
        }
    outputs = stacks["global"]["output"]
    assert {"main_network", "gvnic_network", "nodes_service_account", "warden_role"} <= set(outputs)


def test_workload_identity_bindings(stacks: Stacks) -> None:
    members = {body["member"] for body in of_type(stacks["global"], "google_service_account_iam_member").values()}
    assert "serviceAccount:meridian-train-prod.svc.id.goog[warden/warden]" in members
    assert "serviceAccount:meridian-train-prod.svc.id.goog[team-research/trainer]" in members
