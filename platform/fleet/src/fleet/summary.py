"""The fleet summary that `meridian plan` prints, as text for people and as JSON."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fleet.capacity import Size, fleet_capacity, gpu_capacity, pool_capacity, region_capacity
from fleet.model import CapacityMode, Fleet, GpuPool
from fleet.objectquota import object_quota
from fleet.planner import AddressPlan, RegionRanges
from fleet.quotaplan import QuotaPlan


def capacity_text(pool: GpuPool) -> str:
    c = pool.capacity
    if c.mode is CapacityMode.RESERVATION:
        block = f" block {c.block}" if c.block else ""
        return f"reservation {c.reservation}{block}"
    return {
        CapacityMode.FLEX_START: "flex-start (queued)",
        CapacityMode.SPOT: "spot",
        CapacityMode.ON_DEMAND: "on-demand",
    }[c.mode]


def _gpu_mix(capacity: Size) -> str:
    return ", ".join(f"{n:,} x {t}" for t, n in sorted(capacity.gpus_by_type.items()))


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """Columns padded to their widest cell; numbers right-aligned."""
    cells = [[f"{c:,}" if isinstance(c, int) else str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    numeric = [bool(rows) and all(isinstance(r[i], int) for r in rows) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    return [line(list(headers)), *(line(r) for r in cells)]


def _rdma_text(ranges: RegionRanges, zone: str) -> str:
    subnets = ranges.rdma[zone]
    return f"{zone}: {subnets[0].cidr} .. {subnets[-1].cidr} ({len(subnets)} x /{subnets[0].cidr.prefixlen})"


def _quotas(fleet: Fleet, quotas: QuotaPlan) -> dict[str, dict[str, int]]:
    """team -> region -> nominal GPUs, from the quota plan (what the queues hold), in the spec's order."""
    return {t.name: {r.name: quotas.team(r.name, t.name).gpus for r in fleet.regions} for t in fleet.teams}


def _region_rows(fleet: Fleet) -> list[list[object]]:
    rows: list[list[object]] = []
    for region in fleet.regions:
        c, g = region_capacity(region), gpu_capacity(region)
        zones = ",".join(z.rsplit("-", 1)[1] for z in region.zones)
        about = [region.name, fleet.cluster_name(region), fleet.release_channel(region).value, zones]
        rows.append([*about, c.nodes, g.nodes, g.gpus, c.vcpus, round(c.memory_gb / 1000)])
    return rows


def _pool_rows(fleet: Fleet) -> list[list[object]]:
    rows: list[list[object]] = []
    for region in fleet.regions:
        for pool in region.gpu_pools:
            c = pool_capacity(pool)
            mode, team = capacity_text(pool), pool.team or "shared"
            rows.append([region.name, pool.name, pool.zone, pool.machine_type, c.nodes, c.gpus, mode, team])
    return rows


def _address_lines(addresses: AddressPlan) -> list[str]:
    """Each region's planned ranges (* where fleet.yaml wrote one), then its RDMA subnets per GPU zone."""
    rows: list[list[object]] = []
    for ranges in addresses.regions:
        kinds = (ranges.nodes, ranges.pods, ranges.services, ranges.gvnic, ranges.control_plane)
        rows.append([ranges.region, *(f"{a.cidr}{'*' if a.explicit else ''}" for a in kinds)])
    out = table(["region", "nodes", "pods", "services", "gvnic", "control plane"], rows)
    for ranges in addresses.regions:
        out += [f"  rdma {_rdma_text(ranges, zone)}" for zone in ranges.rdma]
    return out


def render(fleet: Fleet, addresses: AddressPlan, quotas: QuotaPlan) -> str:
    total = fleet_capacity(fleet)
    gpu = sum((gpu_capacity(r) for r in fleet.regions), Size())
    out = [
        f"Fleet {fleet.name} (project {fleet.project.id}): {len(fleet.regions)} regions, "
        f"{sum(len(r.gpu_pools) for r in fleet.regions)} GPU pools, {gpu.nodes:,} GPU nodes, {gpu.gpus:,} GPUs ({_gpu_mix(gpu)})",
        f"All nodes: {total.nodes:,} nodes, {total.vcpus:,} vCPUs, {total.memory_gb / 1000:,.1f} TB memory",
        "",
        "Regions",
    ]
    headers = ["region", "cluster", "channel", "zones", "nodes", "gpu nodes", "gpus", "vcpus", "memory TB"]
    out += table(headers, _region_rows(fleet))
    out += ["", "GPU pools"]
    out += table(["region", "pool", "zone", "machine", "nodes", "gpus", "capacity", "team"], _pool_rows(fleet))
    out += ["", "Team quotas (nominal GPUs)"]
    planned = _quotas(fleet, quotas)
    rows = [[t.name, t.priority, *planned[t.name].values(), sum(planned[t.name].values())] for t in fleet.teams]
    spare = [sum(quotas.regions[r.name].unallocated.values()) for r in fleet.regions]
    rows.append(["unallocated (lent through the cohort)", "", *spare, sum(spare)])  # never an all-zero column
    out += table(["team", "priority", *(r.name for r in fleet.regions), "total"], rows)
    out += ["", "Address ranges (* written in fleet.yaml, others planned)"]
    out += _address_lines(addresses)
    return "\n".join(out) + "\n"


def as_json(fleet: Fleet, addresses: AddressPlan, quotas: QuotaPlan) -> dict[str, Any]:
    def cap(c: Size) -> dict[str, Any]:
        return {
            "nodes": c.nodes,
            "gpus": c.gpus,
            "vcpus": c.vcpus,
            "memory_gb": c.memory_gb,
            "gpus_by_type": dict(sorted(c.gpus_by_type.items())),
        }

    regions = []
    for ranges in addresses.regions:
        region = fleet.regions[ranges.index]
        regions.append(
            {
                "name": region.name,
                "cluster": fleet.cluster_name(region),
                "release_channel": fleet.release_channel(region).value,
                "zones": list(region.zones),
                "capacity": cap(region_capacity(region)),
                "gpu_pools": [
                    {
                        "name": p.name,
                        "zone": p.zone,
                        "machine_type": p.machine_type,
                        "capacity_mode": p.capacity.mode.value,
                        "team": p.team,
                        **cap(pool_capacity(p)),
                    }
                    for p in region.gpu_pools
                ],
                "ranges": {
                    a.path[3]: str(a.cidr)
                    for a in (ranges.nodes, ranges.pods, ranges.services, ranges.gvnic, ranges.control_plane)
                },
                "rdma": {zone: [str(a.cidr) for a in subnets] for zone, subnets in ranges.rdma.items()},
                # GPUs per pool in no team's nominal quota: the cohort's own, lent to every team (fleet.quotaplan)
                "unallocated": quotas.regions[region.name].unallocated,
                # What Kueue and the team namespaces are given, flavor -> resource -> amount (memory in GiB): the
                # plan review compares the rendered ClusterQueues, Cohort and ResourceQuotas with these.
                "kueue": _kueue(quotas, region.name),
                # Each team namespace's object counts (fleet.objectquota): the review compares its ResourceQuota's.
                "objects": {
                    t.name: object_quota(fleet, region, ranges.services.cidr, quotas.team(region.name, t.name))
                    for t in fleet.teams
                },
            }
        )
    return {
        "name": fleet.name,
        "project": fleet.project.id,
        "capacity": cap(fleet_capacity(fleet)),
        "regions": regions,
        "teams": [
            {"name": t.name, "priority": t.priority, "quota": q}
            for t, q in zip(fleet.teams, _quotas(fleet, quotas).values(), strict=True)
        ],
        "priorities": [{"name": p.name, "value": p.value} for p in fleet.priorities],
    }


def _kueue(quotas: QuotaPlan, region: str) -> dict[str, Any]:
    planned = quotas.regions[region]
    return {
        "cohort": planned.cohort,
        "teams": {
            team: {"nominal": q.nominal, "borrowing": q.borrowing, "admissible": q.admissible}
            for team, q in planned.teams.items()
        },
    }
