"""What pools, regions and the fleet hold: nodes, GPUs, vCPUs and memory, as a `Size`.

(`fleet.model.Capacity` is something else: how a pool's machines are bought.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from fleet.catalog import MACHINE_TYPES, MachineType
from fleet.model import CpuPool, Fleet, GpuPool, Region


@dataclass(frozen=True)
class Size:
    """The machines of a pool, a region or the fleet, counted; sizes add up."""

    nodes: int = 0
    gpus: int = 0
    vcpus: int = 0
    memory_gb: int = 0
    gpus_by_type: Counter[str] = field(default_factory=Counter)

    def __add__(self, other: Size) -> Size:
        return Size(
            nodes=self.nodes + other.nodes,
            gpus=self.gpus + other.gpus,
            vcpus=self.vcpus + other.vcpus,
            memory_gb=self.memory_gb + other.memory_gb,
            gpus_by_type=self.gpus_by_type + other.gpus_by_type,
        )


def of_machines(machine: MachineType | None, nodes: int) -> Size:
    """Size of `nodes` machines; an unknown machine type counts nodes only."""
    if machine is None:
        return Size(nodes=nodes)
    by_type = Counter({machine.gpu_type: machine.gpus * nodes}) if machine.gpu_type else Counter[str]()
    return Size(nodes, machine.gpus * nodes, machine.vcpus * nodes, machine.memory_gb * nodes, by_type)


def total(parts: Iterable[Size]) -> Size:
    return sum(parts, Size())


def pool_capacity(pool: GpuPool) -> Size:
    return of_machines(MACHINE_TYPES.get(pool.machine_type), pool.nodes)


def cpu_pool_capacity(pool: CpuPool) -> Size:
    """The most a CPU worker pool scales to."""
    return of_machines(MACHINE_TYPES.get(pool.machine_type), pool.max_nodes)


def system_capacity(region: Region) -> Size:
    pool = region.system_pool
    return of_machines(MACHINE_TYPES.get(pool.machine_type), pool.nodes_per_zone * len(region.zones))


def gpu_capacity(region: Region) -> Size:
    return total(pool_capacity(p) for p in region.gpu_pools)


def region_capacity(region: Region) -> Size:
    """GPU pools and the system pool together."""
    return gpu_capacity(region) + system_capacity(region)


def fleet_capacity(fleet: Fleet) -> Size:
    return total(region_capacity(r) for r in fleet.regions)
