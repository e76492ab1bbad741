"""Node upgrades, capacity modes, CPU worker pools and extra node networks, as GKE and cluster-toolkit require."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from fleet import names
from fleet.load import load
from fleet.model import CapacityMode, GpuPool, Region
from meridian_infra.gpu_pools import PROVIDER_UPGRADE_STRATEGIES
from meridian_infra.report import Stacks
from meridian_infra.synth import synth
from tests.conftest import SHIPPED

FLEET = load(SHIPPED).fleet
GPU_POOLS = [(r, p) for r in FLEET.regions for p in r.gpu_pools]


def pools_of(stacks: Stacks, region: str) -> dict[str, dict[str, Any]]:
    return dict(stacks[region]["resource"]["google_container_node_pool"])


def the_pool(stacks: Stacks, mode: CapacityMode) -> tuple[Region, GpuPool, dict[str, Any]]:
    region, pool = next((r, p) for r, p in GPU_POOLS if p.capacity.mode is mode)
    return region, pool, pools_of(stacks, region.name)[f"pool_{pool.name}"]


@pytest.fixture(scope="session")
def on_demand_stacks(tmp_path_factory: pytest.TempPathFactory) -> Stacks:
    """The shipped fleet with its spot pool bought on demand (the shipped fleet has no on-demand pool)."""
    spec = tmp_path_factory.mktemp("on-demand") / "fleet.yaml"
    text = SHIPPED.read_text()
    assert text.count("capacity: {mode: spot}") == 1
    spec.write_text(text.replace("capacity: {mode: spot}", "capacity: {mode: on_demand}"))
    return synth(spec, Path(spec.parent / "cdktf.out"), backend="local")


# --- 1. upgrades: auto-upgrade on (release channel), held by exclusions (the control plane's minor as well:
# min_master_version is only its floor)


def test_every_node_pool_auto_upgrades(stacks: Stacks) -> None:
    """GKE refuses auto_upgrade = false on a cluster enrolled in a release channel."""
    for region in FLEET.regions:
        for name, body in pools_of(stacks, region.name).items():
            assert body["management"]["auto_upgrade"] is True, f"{region.name}/{name}"


@pytest.mark.parametrize("region", FLEET.regions, ids=[r.name for r in FLEET.regions])
def test_exclusions_hold_node_upgrades_until_end_of_support(stacks: Stacks, region: Region) -> None:
    (cluster,) = stacks[region.name]["resource"]["google_container_cluster"].values()
    exclusions = cluster["maintenance_policy"]["maintenance_exclusion"]
    assert [e["exclusion_name"] for e in exclusions] == [e.name for e in region.cluster.maintenance_exclusions]
    for synthesized, spec in zip(exclusions, region.cluster.maintenance_exclusions, strict=True):
        assert synthesized["start_time"] == spec.start.isoformat().replace("+00:00", "Z")
        assert spec.end is None  # the shipped exclusions have no end
        assert "end_time" not in synthesized
        assert synthesized["exclusion_options"] == {
            "scope": "NO_MINOR_OR_NODE_UPGRADES",
            "end_time_behavior": "UNTIL_END_OF_SUPPORT",
        }
    assert cluster["maintenance_policy"]["recurring_window"]["recurrence"].startswith("FREQ=WEEKLY")


@pytest.mark.parametrize("region", FLEET.regions, ids=[r.name for r in FLEET.regions])
def test_control_plane_version_moves_only_with_fleet_yaml(stacks: Stacks, region: Region) -> None:
    """A literal from fleet.yaml, never a data source: a lookup of the newest patch would change
    whenever Google publishes one, and the next apply would upgrade the control plane at once,
    outside the maintenance window. Patches within the minor come from the release channel."""
    assert "google_container_engine_versions" not in stacks[region.name].get("data", {})
    (cluster,) = stacks[region.name]["resource"]["google_container_cluster"].values()
    assert cluster["min_master_version"] == FLEET.versions.kubernetes
    assert "${" not in cluster["min_master_version"]


def test_every_pool_upgrade_strategy_is_one_the_pinned_provider_accepts(stacks: Stacks) -> None:
    """`terraform plan` fails on a strategy outside the provider's validation set (gpu_pools.py cites it)."""
    checked = 0
    for stack in stacks.values():
        for name, body in stack.get("resource", {}).get("google_container_node_pool", {}).items():
            strategy = (body.get("upgrade_settings") or {}).get("strategy")
            if strategy is not None:
                assert strategy in PROVIDER_UPGRADE_STRATEGIES, f"{name}: {strategy}"
                checked += 1
    assert checked > 0


# --- 2. capacity modes, one test each


def test_flex_start_pool(stacks: Stacks) -> None:
    _, pool, body = the_pool(stacks, CapacityMode.FLEX_START)
    node = body["node_config"]
    assert node["flex_start"] is True
    assert body["queued_provisioning"] == {"enabled": True}
    assert node["reservation_affinity"] == {"consume_reservation_type": "NO_RESERVATION"}
    assert "spot" not in node
    assert body["management"] == {"auto_repair": False, "auto_upgrade": True}
    assert body["autoscaling"] == {
        "total_min_node_count": 0,
        "total_max_node_count": pool.nodes,
        "location_policy": "ANY",
    }
    assert body["initial_node_count"] == 0
    assert "node_count" not in body
    assert "placement_policy" not in body
    # GKE upgrades flex-start nodes with short-lived upgrades itself; the provider refuses SHORT_LIVED.
    assert "upgrade_settings" not in body


def test_reservation_pool_with_a_block(stacks: Stacks) -> None:
    region, pool = next((r, p) for r, p in GPU_POOLS if p.capacity.block)
    body = pools_of(stacks, region.name)[f"pool_{pool.name}"]
    node = body["node_config"]
    assert node["reservation_affinity"] == {
        "consume_reservation_type": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": [f"{pool.capacity.reservation}/reservationBlocks/{pool.capacity.block}"],
    }
    assert body["node_count"] == pool.nodes
    assert "autoscaling" not in body
    assert "queued_provisioning" not in body
    assert "placement_policy" not in body  # the reservation (block) decides placement
    assert "flex_start" not in node
    assert "spot" not in node
    assert body["management"] == {"auto_repair": True, "auto_upgrade": True}
    assert body["upgrade_settings"] == {"strategy": "SURGE", "max_surge": 0, "max_unavailable": 1}


def test_reservation_pool_without_a_block(stacks: Stacks) -> None:
    region, pool = next(
        (r, p) for r, p in GPU_POOLS if p.capacity.mode is CapacityMode.RESERVATION and not p.capacity.block
    )
    node = pools_of(stacks, region.name)[f"pool_{pool.name}"]["node_config"]
    assert node["reservation_affinity"]["values"] == [pool.capacity.reservation]


def test_spot_pool(stacks: Stacks) -> None:
    _, pool, body = the_pool(stacks, CapacityMode.SPOT)
    node = body["node_config"]
    assert node["spot"] is True
    assert "flex_start" not in node
    assert node["reservation_affinity"] == {"consume_reservation_type": "NO_RESERVATION"}
    assert body["placement_policy"] == {"type": "COMPACT"}
    assert body["node_count"] == pool.nodes
    assert "queued_provisioning" not in body
    assert "autoscaling" not in body
    assert body["management"] == {"auto_repair": True, "auto_upgrade": True}
    assert body["upgrade_settings"] == {"strategy": "SURGE", "max_surge": 0, "max_unavailable": 1}


def test_on_demand_pool(on_demand_stacks: Stacks) -> None:
    body = on_demand_stacks["europe-west1"]["resource"]["google_container_node_pool"]["pool_h200-spot"]
    node = body["node_config"]
    assert "spot" not in node
    assert "flex_start" not in node
    # No reservation: an on-demand pool must not consume capacity reserved for another pool.
    assert node["reservation_affinity"] == {"consume_reservation_type": "NO_RESERVATION"}
    assert body["placement_policy"] == {"type": "COMPACT"}
    assert body["node_count"] == 128
    assert body["management"] == {"auto_repair": True, "auto_upgrade": True}
    assert body["upgrade_settings"] == {"strategy": "SURGE", "max_surge": 0, "max_unavailable": 1}


@pytest.mark.parametrize("region", FLEET.regions, ids=[r.name for r in FLEET.regions])
def test_cpu_worker_pools(stacks: Stacks, region: Region) -> None:
    pools = pools_of(stacks, region.name)
    assert region.cpu_pools
    system = pools["pool_system"]["node_config"]
    for spec in region.cpu_pools:
        body = pools[f"pool_{spec.name}"]
        assert body["name"] == spec.name
        assert body["node_locations"] == list(region.zones)
        assert body["autoscaling"] == {
            "total_min_node_count": spec.min_nodes,
            "total_max_node_count": spec.max_nodes,
            "location_policy": "BALANCED",
        }
        assert "node_count" not in body
        assert body["max_pods_per_node"] == spec.max_pods_per_node
        assert body["management"] == {"auto_repair": True, "auto_upgrade": True}
        assert body["upgrade_settings"] == {"strategy": "SURGE", "max_surge": 1, "max_unavailable": 0}
        node = body["node_config"]
        assert node["machine_type"] == spec.machine_type
        assert node["image_type"] == "COS_CONTAINERD"
        assert node["labels"] == {names.POOL_LABEL: spec.name}
        assert "guest_accelerator" not in node
        assert "taint" not in node
        for key in (
            "service_account",
            "oauth_scopes",
            "workload_metadata_config",
            "shielded_instance_config",
            "metadata",
        ):
            assert node[key] == system[key], key


# --- 3. extra node networks by name


_REFERENCE = re.compile(r"\$\{[^}]*\}")


def test_additional_node_networks_are_plain_names(stacks: Stacks) -> None:
    """A self link or id would make a plan replace the pool for a spelling; `.name` references keep the order."""
    seen = 0
    for region in FLEET.regions:
        for name, body in pools_of(stacks, region.name).items():
            for nic in body.get("network_config", {}).get("additional_node_network_configs", []):
                for key in ("network", "subnetwork"):
                    value = nic[key]
                    refs = _REFERENCE.findall(value)
                    assert all(r.endswith(".name}") for r in refs), f"{region.name}/{name} {key}={value}"
                    assert "/" not in _REFERENCE.sub("", value), f"{region.name}/{name} {key}={value}"
                    seen += 1
    assert seen == 2 * 9 * len(GPU_POOLS)


def test_gvnic_network_is_named(stacks: Stacks) -> None:
    _, pool, body = the_pool(stacks, CapacityMode.RESERVATION)
    (gvnic, *rdma) = body["network_config"]["additional_node_network_configs"]
    assert gvnic["network"] == names.gvnic_network(FLEET)
    assert gvnic["subnetwork"] == "${google_compute_subnetwork.gvnic_subnet.name}"
    assert {n["network"] for n in rdma} == {f"${{google_compute_network.rdma_{pool.zone}.name}}"}


@pytest.mark.parametrize("region", FLEET.regions, ids=[r.name for r in FLEET.regions])
def test_internal_load_balancers_use_gke_subsetting(stacks: Stacks, region: Region) -> None:
    """A run's Lighthouse is an internal passthrough load balancer; without GKE subsetting its backend
    holds every node, at most 250 (cluster.py cites Google), and the shipped clusters hold more."""
    assert max(sum(p.nodes for p in r.gpu_pools) for r in FLEET.regions) > 250
    (cluster,) = stacks[region.name]["resource"]["google_container_cluster"].values()
    assert cluster["enable_l4_ilb_subsetting"] is True
