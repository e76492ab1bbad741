"""Capacity arithmetic per pool, region and fleet."""

from __future__ import annotations

from typing import Any

from fleet.capacity import fleet_capacity, gpu_capacity, region_capacity, system_capacity
from fleet.catalog import MACHINE_TYPES, MachineType, pod_block_size
from fleet.model import Fleet


def test_catalog_has_h200_and_h100_machines() -> None:
    ultra, mega = MACHINE_TYPES["a3-ultragpu-8g"], MACHINE_TYPES["a3-megagpu-8g"]
    assert (ultra.gpus, ultra.gpu_type, ultra.vcpus, ultra.rdma_nics) == (8, "nvidia-h200-141gb", 224, 8)
    assert (mega.gpus, mega.gpu_type, mega.rdma_nics) == (8, "nvidia-h100-mega-80gb", 0)
    assert not MACHINE_TYPES["n2-standard-32"].is_gpu


def test_region_and_fleet_totals_add_pools_and_system_nodes(spec: dict[str, Any]) -> None:
    spec["regions"][1]["gpu_pools"].append(
        {
            "name": "h100",
            "machine_type": "a3-megagpu-8g",
            "zone": "us-east4-a",
            "nodes": 10,
            "capacity": {"mode": "on_demand"},
        }
    )
    fleet = Fleet.model_validate(spec)
    east = fleet.regions[1]
    assert system_capacity(east).nodes == 2 * 3
    assert system_capacity(east).vcpus == 6 * 32
    assert gpu_capacity(east).gpus == 384 * 8 + 10 * 8
    assert dict(gpu_capacity(east).gpus_by_type) == {"nvidia-h200-141gb": 3072, "nvidia-h100-mega-80gb": 80}
    assert region_capacity(east).nodes == 384 + 10 + 6
    assert region_capacity(east).memory_gb == 384 * 2952 + 10 * 1872 + 6 * 128
    total = fleet_capacity(fleet)
    assert total.gpus == 10_240 + 80
    assert total.nodes == sum(region_capacity(r).nodes for r in fleet.regions)


def test_pod_block_is_the_power_of_two_above_twice_max_pods() -> None:
    assert [pod_block_size(n) for n in (8, 16, 32, 64, 110, 256)] == [16, 32, 64, 128, 256, 512]


def test_preflight_thresholds_come_from_the_catalog() -> None:
    from fleet.catalog import thresholds

    def preflight_args(m: MachineType, nodes: int) -> list[str]:
        return list(thresholds(m).args(nodes))

    ultra = MACHINE_TYPES["a3-ultragpu-8g"]
    assert preflight_args(ultra, 1) == ["--expect-gpus=8", "--min-tflops=600", "--min-busbw-gbps=368"]
    assert preflight_args(ultra, 16) == ["--expect-gpus=8", "--min-tflops=600", "--min-busbw-gbps=256"]
    assert preflight_args(MACHINE_TYPES["a3-megagpu-8g"], 2)[-1] == "--no-rdma"
    assert preflight_args(MACHINE_TYPES["n2-standard-32"], 1) == ["--no-rdma"]
