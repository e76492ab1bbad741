"""The shipped fleet.yaml is valid and describes the fleet the platform is sized for."""

from __future__ import annotations

from fleet.capacity import fleet_capacity, gpu_capacity, pool_capacity, region_capacity
from fleet.catalog import MACHINE_TYPES
from fleet.load import load
from fleet.model import CapacityMode
from tests.conftest import SHIPPED


def test_shipped_fleet_holds_about_10240_h200_over_three_regions() -> None:
    fleet = load(SHIPPED).fleet
    assert len(fleet.regions) == 3
    gpus = sum(gpu_capacity(r).gpus for r in fleet.regions)
    assert gpus == 10_240
    assert dict(fleet_capacity(fleet).gpus_by_type) == {"nvidia-h200-141gb": 10_240}


def test_shipped_pools_are_in_zones_that_offer_their_machine() -> None:
    fleet = load(SHIPPED).fleet
    for region in fleet.regions:
        for pool in region.gpu_pools:
            assert MACHINE_TYPES[pool.machine_type].offered_in(pool.zone), (region.name, pool.name)


def test_shipped_fleet_mixes_capacity_modes_and_teams() -> None:
    fleet = load(SHIPPED).fleet
    modes = {p.capacity.mode for r in fleet.regions for p in r.gpu_pools}
    assert {CapacityMode.RESERVATION, CapacityMode.FLEX_START} <= modes
    assert len(fleet.teams) >= 2


def test_team_quotas_fit_every_region() -> None:
    fleet = load(SHIPPED).fleet
    for region in fleet.regions:
        quota = sum(t.quota.get(region.name, 0) for t in fleet.teams)
        assert 0 < quota <= region_capacity(region).gpus


def test_pool_capacity_multiplies_the_machine() -> None:
    pool = load(SHIPPED).fleet.regions[0].gpu_pools[0]
    capacity = pool_capacity(pool)
    assert (capacity.nodes, capacity.gpus, capacity.vcpus, capacity.memory_gb) == (384, 3072, 384 * 224, 384 * 2952)
