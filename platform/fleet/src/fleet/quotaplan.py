"""Quota planning: every team's nominal quota in every region, split over pools, checked once.

A team's quota in a region is split over the GPU pools it may use (the shared
ones and its own): its dedicated pools first, then the shared pools in
proportion to their size, in whole nodes, never past what earlier teams left
in a pool. The shares add up exactly to the quota, or the spec is refused: the
Kueue queues, the namespaces' ResourceQuotas and gkr's quota check all read
this plan, so none of them can quietly hold less than the spec promises.

Each CPU pool (Ray heads, CPU-only jobs) is split over the teams in proportion
to their GPU quota in the region, so a team's gangs can always reclaim the CPU
their heads need.

Every GPU belongs to someone: what no team's nominal quota covers in a pool (a
pool grown past the quotas, a region no team has quota in) is the cohort's own
quota in that pool's flavor (`RegionQuotas.cohort`), which Kueue lends to every
queue in the cohort: a Cohort's nominalQuota is "additional resources on top of
those defined by ClusterQueues ... a shared pool for the ClusterQueues within
it" (Kueue v0.19.2 Cohort CRD, spec.resourceGroups, pinned under
/work/shared/crds/kueue; https://kueue.sigs.k8s.io/docs/concepts/cohort/). Nobody
is guaranteed those GPUs, so `meridian plan` warns (`unallocated_warnings`). In
each flavor a team may borrow at most what the other teams hold nominally there
plus the cohort's own quota: exactly the most Kueue could lend, and nominal +
borrowing over the flavors is the most Kueue can ever admit for the team in the
region (`admissible`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from contract.problem import Problem
from contract.registry import team_pools
from fleet import names
from fleet.capacity import cpu_pool_capacity, pool_capacity
from fleet.catalog import MACHINE_TYPES
from fleet.model import Fleet, GpuPool, Region

GPU = names.GPU_RESOURCE
Quota = dict[str, int]  # resource (GPU, "cpu", "memory" in GiB) -> amount


@dataclass(frozen=True)
class TeamQuota:
    team: str
    gpus: int  # nominal GPUs in the region: the pool shares' sum, what gkr checks a job against
    pools: dict[str, int]  # GPU pool the team may use -> nominal GPUs, whole nodes
    nominal: dict[str, Quota]  # Kueue flavor -> nominal quota, CPU pools first (see fleet.gitops.kueue)
    borrowing: dict[str, Quota]  # flavor -> borrowing limit: what the other teams hold nominally there
    admissible: Quota  # nominal + borrowing over every flavor: the namespace's ResourceQuota


@dataclass(frozen=True)
class RegionQuotas:
    region: str
    teams: dict[str, TeamQuota]
    cohort: dict[str, Quota]  # GPU pool flavor -> the cohort's own quota: GPUs no team holds, with their hosts

    @property
    def unallocated(self) -> dict[str, int]:
        """GPU pool -> GPUs in no team's nominal quota (lent to every team through the cohort)."""
        return {flavor: quota[GPU] for flavor, quota in self.cohort.items()}


@dataclass(frozen=True)
class QuotaPlan:
    regions: dict[str, RegionQuotas]

    def team(self, region: str, team: str) -> TeamQuota:
        return self.regions[region].teams[team]


def apportion(total: int, weights: list[int]) -> list[int]:
    """`total` in whole units over `weights`, adding up exactly (largest remainder; ties to the first).

    No weight at all splits evenly.
    """
    if not weights:
        return []
    if not any(weights):
        weights = [1] * len(weights)
    whole = sum(weights)
    shares = [total * w // whole for w in weights]
    by_remainder = sorted(range(len(weights)), key=lambda i: (-(total * weights[i] % whole), i))
    for i in by_remainder[: total - sum(shares)]:
        shares[i] += 1
    return shares


def plan_quotas(fleet: Fleet) -> tuple[QuotaPlan, list[Problem]]:
    regions: dict[str, RegionQuotas] = {}
    problems: list[Problem] = []
    for index, region in enumerate(fleet.regions):
        quotas, found = _plan_region(fleet, index, region)
        regions[region.name] = quotas
        problems += found
    return QuotaPlan(regions), problems


def _node_gpus(pool: GpuPool) -> int:
    machine = MACHINE_TYPES.get(pool.machine_type)
    return machine.gpus if machine is not None else 0


def _plan_region(fleet: Fleet, index: int, region: Region) -> tuple[RegionQuotas, list[Problem]]:
    # Pools of unknown or CPU machine types, repeated names, pools of unknown teams: the rules report
    # those, and quota problems drawn from them would only repeat them.
    teams = [t.name for t in fleet.teams]
    pool_names = [p.name for p in region.gpu_pools]
    sound = (
        all(_node_gpus(p) for p in region.gpu_pools)
        and len(set(pool_names)) == len(pool_names)
        and len(set(teams)) == len(teams)
        and all(p.team is None or p.team in teams for p in region.gpu_pools)
    )
    problems = _check_region(fleet, index, region) if sound else []
    left = {p.name: pool_capacity(p).gpus for p in region.gpu_pools}  # what earlier teams left in each pool
    pools = {t.name: _split(region, t.name, t.quota.get(region.name, 0), left) for t in fleet.teams}
    gpus = {t.name: sum(pools[t.name].values()) for t in fleet.teams}
    if sound and not problems:  # whole nodes of mixed sizes can miss a quota the checks let through
        problems += [
            Problem(
                path=("teams", i, "quota", region.name),
                message=f"{t.quota[region.name]:,} GPUs cannot be split in whole nodes "
                f"over {', '.join(pools[t.name])}; the nearest split is {gpus[t.name]:,}: use that",
            )
            for i, t in enumerate(fleet.teams)
            if gpus[t.name] != t.quota.get(region.name, 0)
        ]
    nominal: dict[str, dict[str, Quota]] = {t.name: {} for t in fleet.teams}
    weights = [gpus[t.name] for t in fleet.teams]
    for cpu_pool in region.cpu_pools:
        capacity = cpu_pool_capacity(cpu_pool)
        shares = zip(apportion(capacity.vcpus, weights), apportion(capacity.memory_gb, weights), strict=True)
        for team, (vcpus, memory) in zip(fleet.teams, shares, strict=True):
            nominal[team.name][cpu_pool.name] = {GPU: 0, "cpu": vcpus, "memory": memory}
    for team in fleet.teams:
        for pool in team_pools(region.gpu_pools, team.name):
            nominal[team.name][pool.name] = _with_host(pool, pools[team.name][pool.name])
    # `left` now holds what no team's quota took: the cohort's own quota, lent to every queue.
    cohort = {p.name: _with_host(p, left[p.name]) for p in region.gpu_pools if left[p.name] > 0}
    planned = {}
    for team in fleet.teams:
        borrowing = {
            flavor: {
                r: sum(nominal[o.name].get(flavor, {}).get(r, 0) for o in fleet.teams if o is not team)
                + cohort.get(flavor, {}).get(r, 0)
                for r in q
            }
            for flavor, q in nominal[team.name].items()
        }
        admissible = {
            r: sum(q[r] + borrowing[flavor][r] for flavor, q in nominal[team.name].items())
            for r in (GPU, "cpu", "memory")
        }
        planned[team.name] = TeamQuota(
            team.name, gpus[team.name], pools[team.name], nominal[team.name], borrowing, admissible
        )
    return RegionQuotas(region.name, planned, cohort), problems


def unallocated_warnings(fleet: Fleet, plan: QuotaPlan) -> list[str]:
    """One line per region with GPUs in no team's nominal quota: where, how many, what Kueue does, the fix."""
    lines = []
    for index, region in enumerate(fleet.regions):
        spare = plan.regions[region.name].unallocated
        if not spare:
            continue
        total = sum(pool_capacity(p).gpus for p in region.gpu_pools)
        pools = ", ".join(f"{pool} {gpus:,}" for pool, gpus in spare.items())
        lines.append(
            f"regions[{index}] ({region.name}): {sum(spare.values()):,} of {total:,} GPUs are in no team's "
            f"nominal quota ({pools}); Kueue lends them to every team through its cohort, guaranteed to none: "
            f"give them to teams under teams[].quota.{region.name} to guarantee them"
        )
    return lines


def _with_host(pool: GpuPool, gpus: int) -> Quota:
    """GPU quota, and the CPU and memory that come with that many GPUs of the machine."""
    machine = MACHINE_TYPES.get(pool.machine_type)
    if machine is None or not machine.gpus:  # refused by the rules; the plan is never used
        return {GPU: gpus, "cpu": 0, "memory": 0}
    return {GPU: gpus, "cpu": gpus * machine.vcpus // machine.gpus, "memory": gpus * machine.memory_gb // machine.gpus}


def _split(region: Region, team: str, quota: int, left: dict[str, int]) -> dict[str, int]:
    """The team's nominal GPUs per pool, in whole nodes, taken out of `left` (what earlier teams left)."""
    usable = team_pools(region.gpu_pools, team)
    shares = {p.name: 0 for p in usable}
    wanted = quota

    def take(pool: GpuPool, gpus: int) -> None:
        nonlocal wanted
        node = _node_gpus(pool) or 1
        gpus = min(gpus, wanted, left[pool.name]) // node * node
        shares[pool.name] += gpus
        left[pool.name] -= gpus
        wanted -= gpus

    for pool in usable:
        if pool.team == team:
            take(pool, left[pool.name])
    shared = [p for p in usable if p.team is None]
    total = sum(pool_capacity(p).gpus for p in shared)
    if wanted and total:
        budget = wanted
        for pool in shared:  # in proportion to the pools' size, so every pool is loaded alike
            take(pool, budget * pool_capacity(pool).gpus // total)
        for pool in sorted(shared, key=lambda p: -pool_capacity(p).gpus):  # rounding remainder: largest first
            take(pool, wanted)
    return shares


def _check_region(fleet: Fleet, index: int, region: Region) -> list[Problem]:
    """Quotas the pools cannot hold in whole nodes: per team first; the region's sum only if each fits."""
    problems = []
    held = {p.name: pool_capacity(p).gpus for p in region.gpu_pools}
    shared = [p.name for p in region.gpu_pools if p.team is None]
    demand = 0  # GPUs the teams need from the shared pools, after their own
    for i, team in enumerate(fleet.teams):
        quota = team.quota.get(region.name, 0)
        usable = team_pools(region.gpu_pools, team.name)
        path = ("teams", i, "quota", region.name)
        can = sum(held[p.name] for p in usable)
        own = sum(held[p.name] for p in usable if p.team == team.name)
        step = math.gcd(*(_node_gpus(p) for p in usable)) if usable else 1
        if quota > can:
            if len(usable) == len(region.gpu_pools):
                where = f"that {region.name} holds"
            else:
                others = [f"{p.name} ({p.team}'s)" for p in region.gpu_pools if p not in usable]
                where = (
                    f"team {team.name} may use in {region.name} "
                    f"({', '.join(p.name for p in usable) or 'no pool'}; not {', '.join(others)})"
                )
            problems.append(
                Problem(
                    path=path,
                    message=f"quota of {quota:,} GPUs is above the {can:,} GPUs {where}; lower it to {can:,} or add pools",
                )
            )
        elif quota % step:
            below = quota // step * step
            problems.append(
                Problem(
                    path=path,
                    message=f"quota of {quota:,} GPUs is not whole nodes of {step} GPUs "
                    f"({', '.join(p.name for p in usable)}); raise it to {below + step:,} or lower it to {below:,}",
                )
            )
        demand += max(0, quota - own)
    if problems:
        return problems
    total = sum(t.quota.get(region.name, 0) for t in fleet.teams)
    at = ("regions", index, "name")
    if total > sum(held.values()):
        problems.append(
            Problem(
                path=at,
                message=f"teams' quotas in {region.name} add up to {total:,} GPUs but the region holds {sum(held.values()):,}; "
                "nominal quotas are guarantees, so lower them or add pools",
            )
        )
    elif demand > (room := sum(held[p] for p in shared)):
        problems.append(
            Problem(
                path=at,
                message=f"beyond their own pools, teams' quotas in {region.name} need {demand:,} GPUs of the shared pools "
                f"({', '.join(shared) or 'none'}), which hold {room:,}; lower them or add shared pools",
            )
        )
    return problems
