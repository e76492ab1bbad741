"""Address planning: every range of every region, checked for overlap and size.

Planned ranges depend only on the network plan settings, the region's place in
`regions` and the zone's place in the region's `zones`, never on pools or on
other regions. So appending a region, a zone or a pool never moves a range
(a moved range recreates its subnet, and with it the cluster). Each region gets
the block `supernet / region_prefix` at its index, cut the same way:

    pods | RDMA (one slot of 8 subnets per zone) | nodes | services | gVNIC | control plane

A range written explicitly in `regions[i].network` replaces the planned one;
all ranges, explicit or planned, are then checked against each other.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from ipaddress import IPv4Network

from contract.problem import Path, Problem
from fleet.catalog import MACHINE_TYPES, pod_block_size
from fleet.model import Fleet, GpuPool, NetworkPlan, Region

RDMA_SUBNETS = 8  # one per ConnectX NIC, i.e. per GPU
GCP_RESERVED = 4  # addresses Google reserves in every subnet's primary range
SUBNET_KINDS = ("nodes", "pods", "services", "gvnic", "control_plane")


@dataclass(frozen=True)
class Assigned:
    path: Path  # where it is (or would be) written in the spec
    label: str
    cidr: IPv4Network
    explicit: bool


@dataclass(frozen=True)
class RegionRanges:
    index: int  # position in fleet.regions
    region: str
    nodes: Assigned
    pods: Assigned
    services: Assigned
    gvnic: Assigned
    control_plane: Assigned
    rdma: dict[str, tuple[Assigned, ...]]  # GPU zone with RDMA pools -> its 8 subnets

    def all(self) -> Iterator[Assigned]:
        for kind in SUBNET_KINDS:
            yield getattr(self, kind)
        for subnets in self.rdma.values():
            yield from subnets


@dataclass(frozen=True)
class AddressPlan:
    regions: tuple[RegionRanges, ...]

    def all(self) -> Iterator[Assigned]:
        for region in self.regions:
            yield from region.all()


def peer_pod_ranges(plan: AddressPlan, region: str) -> list[IPv4Network]:
    """The pod ranges of every region but `region`, in fleet order: whom a run across regions
    lets reach this region's pods (infra's cross-region firewall rule). Empty for one region."""
    return [r.pods.cidr for r in plan.regions if r.region != region]


def layout(plan: NetworkPlan) -> tuple[dict[str, tuple[int, int]], int]:
    """Offset and size of each kind of range inside a region block, and the total span."""
    sizes = {
        "pods": 2 ** (32 - plan.pod_prefix),
        "rdma": _pow2_at_least(plan.rdma_zone_slots * RDMA_SUBNETS * 2 ** (32 - plan.rdma_subnet_prefix)),
        "nodes": 2 ** (32 - plan.node_prefix),
        "services": 2 ** (32 - plan.service_prefix),
        "gvnic": 2 ** (32 - plan.gvnic_prefix),
        "control_plane": 16,
    }
    order = ("pods", "rdma", "nodes", "services", "gvnic", "control_plane")
    offsets: dict[str, tuple[int, int]] = {}
    offset = 0
    # Largest first keeps every range aligned to its own size with no gaps.
    for kind in sorted(order, key=lambda k: (-sizes[k], order.index(k))):
        offset = -(-offset // sizes[kind]) * sizes[kind]
        offsets[kind] = (offset, sizes[kind])
        offset += sizes[kind]
    return offsets, offset


def _pow2_at_least(n: int) -> int:
    size = 1
    while size < n:
        size *= 2
    return size


def _cidr(start: int, size: int) -> IPv4Network:
    return IPv4Network((start, 32 - size.bit_length() + 1))


def rdma_zones(region: Region) -> list[str]:
    """Zones of the region, in spec order, that have a pool with RDMA NICs."""
    used = {p.zone for p in region.gpu_pools if _has_rdma(p)}
    return [z for z in region.zones if z in used]


def _has_rdma(pool: GpuPool) -> bool:
    machine = MACHINE_TYPES.get(pool.machine_type)
    return machine is not None and machine.rdma_nics > 0


def plan_addresses(fleet: Fleet) -> tuple[AddressPlan, list[Problem]]:
    net = fleet.network
    problems: list[Problem] = []
    offsets, span = layout(net)
    region_size = 2 ** (32 - net.region_prefix)
    if net.region_prefix < net.supernet.prefixlen:
        problems.append(
            Problem(
                path=("network", "region_prefix"),
                message=f"/{net.region_prefix} per region is larger than the supernet {net.supernet}; use a prefix of at least /{net.supernet.prefixlen}",
            )
        )
        return AddressPlan(()), problems
    if span > region_size:
        problems.append(
            Problem(
                path=("network", "region_prefix"),
                message=f"one region's ranges need {span:,} addresses but /{net.region_prefix} holds {region_size:,}; use a shorter region_prefix or longer range prefixes",
            )
        )
        return AddressPlan(()), problems
    slots = 2 ** (net.region_prefix - net.supernet.prefixlen)
    regions = []
    for index, region in enumerate(fleet.regions):
        missing = [k for k in SUBNET_KINDS if getattr(region.network, k) is None]
        missing += [z for z in rdma_zones(region) if z not in region.network.rdma]
        if index >= slots and missing:
            problems.append(
                Problem(
                    path=("regions", index, "network"),
                    message=f"the supernet {net.supernet} holds {slots} regions of /{net.region_prefix}; "
                    f"write this region's ranges ({', '.join(missing)}) explicitly, or plan a larger supernet",
                )
            )
            continue
        base = int(net.supernet.network_address) + index * region_size
        ranges, found = _plan_region(region, index, base, offsets, net)
        problems.extend(found)
        regions.append(ranges)
    plan = AddressPlan(tuple(regions))
    problems.extend(_overlaps(plan))
    problems.extend(_sizes(fleet, plan))
    return plan, problems


def _plan_region(
    region: Region, index: int, base: int, offsets: dict[str, tuple[int, int]], net: NetworkPlan
) -> tuple[RegionRanges, list[Problem]]:
    at: Path = ("regions", index, "network")
    problems: list[Problem] = []

    def assign(kind: str) -> Assigned:
        explicit = getattr(region.network, kind)
        if explicit is not None:
            return Assigned((*at, kind), f"{region.name} {kind}", explicit, True)
        offset, size = offsets[kind]
        return Assigned((*at, kind), f"{region.name} {kind}", _cidr(base + offset, size), False)

    subnets = {kind: assign(kind) for kind in SUBNET_KINDS}
    rdma: dict[str, tuple[Assigned, ...]] = {}
    wanted = rdma_zones(region)
    for zone in region.network.rdma:
        if zone not in wanted:
            problems.append(
                Problem(
                    path=(*at, "rdma", zone),
                    message=f"zone {zone!r} has no pool with RDMA NICs in {region.name}; remove these ranges",
                )
            )
    rdma_offset, _ = offsets["rdma"]
    subnet_size = 2 ** (32 - net.rdma_subnet_prefix)
    for zone in wanted:
        path = (*at, "rdma", zone)
        explicit = region.network.rdma.get(zone)
        if explicit is not None:
            if len(explicit) != RDMA_SUBNETS:
                problems.append(
                    Problem(
                        path=path,
                        message=f"{len(explicit)} RDMA ranges given; an A3 Ultra zone needs exactly {RDMA_SUBNETS}, one per NIC",
                    )
                )
            rdma[zone] = tuple(
                Assigned((*path, n), f"{region.name} rdma {zone}[{n}]", c, True) for n, c in enumerate(explicit)
            )
            continue
        slot = region.zones.index(zone)
        if slot >= net.rdma_zone_slots:
            problems.append(
                Problem(
                    path=path,
                    message=f"network.rdma_zone_slots is {net.rdma_zone_slots} and {zone} is zone #{slot + 1}; "
                    f"write its {RDMA_SUBNETS} RDMA ranges explicitly",
                )
            )
            continue
        start = base + rdma_offset + slot * RDMA_SUBNETS * subnet_size
        rdma[zone] = tuple(
            Assigned((*path, n), f"{region.name} rdma {zone}[{n}]", _cidr(start + n * subnet_size, subnet_size), False)
            for n in range(RDMA_SUBNETS)
        )
    return RegionRanges(index, region.name, rdma=rdma, **subnets), problems


def _overlaps(plan: AddressPlan) -> Iterator[Problem]:
    """Sweep the ranges in address order; report each range that overlaps an earlier one once."""
    ranges = sorted(plan.all(), key=lambda a: (int(a.cidr.network_address), -a.cidr.num_addresses))
    widest: Assigned | None = None
    for item in ranges:
        if widest is not None and item.cidr.network_address <= widest.cidr.broadcast_address:
            # Blame the range a person wrote; between two of the same kind, the later one.
            blamed, other = (widest, item) if widest.explicit and not item.explicit else (item, widest)
            how = "given" if other.explicit else "planned"
            yield Problem(
                path=blamed.path,
                message=f"{blamed.cidr} overlaps {other.label} {other.cidr} ({how}); pick a free range",
            )
        if widest is None or item.cidr.broadcast_address > widest.cidr.broadcast_address:
            widest = item


def _sizes(fleet: Fleet, plan: AddressPlan) -> Iterator[Problem]:
    """Each range must hold what its region puts in it.

    A planned range that is too small is a planning setting's fault: it is
    reported once, at that setting, for the region that needs the most.
    """
    short: dict[str, tuple[int, Problem]] = {}  # setting -> (need, problem)
    for ranges in plan.regions:
        region = fleet.regions[ranges.index]
        system_nodes = region.system_pool.nodes_per_zone * len(region.zones)
        gpu_nodes = sum(p.nodes for p in region.gpu_pools)
        nodes = system_nodes + gpu_nodes
        pod_addresses = system_nodes * pod_block_size(region.system_pool.max_pods_per_node) + sum(
            p.nodes * pod_block_size(p.max_pods_per_node) for p in region.gpu_pools
        )
        needs = [
            (ranges.nodes, nodes + GCP_RESERVED, f"{nodes:,} nodes"),
            (ranges.pods, pod_addresses, f"{nodes:,} nodes at their max pods per node"),
            (ranges.gvnic, gpu_nodes + GCP_RESERVED, f"{gpu_nodes:,} GPU nodes"),
            (ranges.services, 32, "GKE's minimum of a /27"),
        ]
        for zone, subnets in ranges.rdma.items():
            rdma_nodes = sum(p.nodes for p in region.gpu_pools if p.zone == zone and _has_rdma(p))
            # The 8 subnets of a zone serve the same nodes: judge them as one.
            needs.append((subnets[0], rdma_nodes + GCP_RESERVED, f"{rdma_nodes:,} RDMA nodes in {zone}"))
        for assigned, need, what in needs:
            have = assigned.cidr.num_addresses
            if have >= need:
                continue
            prefix = 32 - (need - 1).bit_length()
            if assigned.explicit:
                path = assigned.path[:5] if assigned.path[3] == "rdma" else assigned.path
                yield Problem(
                    path=path,
                    message=f"{assigned.cidr} holds {have:,} addresses but {what} need {need:,} (a /{prefix}); write a larger range",
                )
                continue
            kind = assigned.path[3]
            setting = "rdma_subnet_prefix" if kind == "rdma" else f"{kind}_prefix"
            problem = Problem(
                path=("network", setting),
                message=f"planned /{assigned.cidr.prefixlen} {kind} ranges hold {have:,} addresses but {what} need {need:,}; "
                f"set {setting} to {prefix} or less",
            )
            if need > short.get(setting, (0, problem))[0]:
                short[setting] = (need, problem)
        if ranges.control_plane.cidr.prefixlen != 28:
            yield Problem(
                path=ranges.control_plane.path,
                message=f"{ranges.control_plane.cidr} is not a /28; GKE's control-plane range is exactly a /28",
            )
    for _, problem in short.values():
        yield problem
