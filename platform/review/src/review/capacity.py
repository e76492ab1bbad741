"""GPUs per region and per team, before and after.

Team quotas come from each side's `meridian plan --json`, and, as Argo CD applies them, from each
side's rendered ClusterQueues (security/quotas.py lists where the two disagree). Region capacity comes from what
Terraform will do: each side's synthesized stacks, or, for a stack with a plan file
(`terraform show -json`), that plan's before and after. Any decrease of a node pool's GPUs,
whatever caused it, and any move of a pool to other zones is destructive. Owners of the
destructive lines: a pool that goes away is terraform.py's ("deletes node pool ..."), never
repeated here; a pool on both sides that shrinks or moves is this module's, and its move line
stands in for terraform.py's "replaces" line of that pool (`destructive_lines` merges both).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from meridian_infra.report import pool_capacity
from review.kubernetes import Clusters
from review.security.quotas import queue_gpus
from review.terraform import NODE_POOL, StackDiff, Stacks, nested_block, short_gpu


@dataclass(frozen=True)
class Delta:
    name: str
    before: int
    after: int


def region_gpus(plan: dict[str, Any] | None) -> dict[str, int]:
    return {r["name"]: int(r["capacity"]["gpus"]) for r in (plan or {}).get("regions", [])}


def team_gpus(plan: dict[str, Any] | None) -> dict[str, dict[str, int]]:
    return {t["name"]: {k: int(v) for k, v in t["quota"].items()} for t in (plan or {}).get("teams", [])}


def unallocated_gpus(plan: dict[str, Any] | None) -> dict[str, int]:
    """ "region pool" -> GPUs in no team's nominal quota, lent through the Kueue cohort (fleet.quotaplan).

    A side whose plan predates the field has none."""
    return {
        f"{r['name']} {pool}": int(gpus)
        for r in (plan or {}).get("regions", [])
        for pool, gpus in (r.get("unallocated") or {}).items()
    }


def unallocated_deltas(before: dict[str, Any] | None, after: dict[str, Any] | None) -> list[Delta]:
    return _deltas(unallocated_gpus(before), unallocated_gpus(after))


def queue_deltas(before: Clusters, after: Clusters, before_plan: Any, after_plan: Any) -> list[Delta]:
    """Nominal GPUs per rendered ClusterQueue ("research in us-east4 (ClusterQueue)"), each side's own."""
    return _deltas(queue_gpus(before, before_plan), queue_gpus(after, after_plan))


def _deltas(before: dict[str, int], after: dict[str, int]) -> list[Delta]:
    names = [*after, *(n for n in before if n not in after)]
    return [Delta(n, before.get(n, 0), after.get(n, 0)) for n in names]


def capacity_deltas(before: dict[str, Any] | None, after: dict[str, Any] | None) -> tuple[list[Delta], list[Delta]]:
    """(regions, teams): total GPUs per region; nominal GPUs per team (all regions), and per team and region."""
    regions = _deltas(region_gpus(before), region_gpus(after))
    old, new = team_gpus(before), team_gpus(after)
    teams = _deltas({t: sum(q.values()) for t, q in old.items()}, {t: sum(q.values()) for t, q in new.items()})
    per_region = []
    for team in [*new, *(t for t in old if t not in new)]:
        o, n = old.get(team, {}), new.get(team, {})
        per_region += [
            Delta(f"{team} in {r}", o.get(r, 0), n.get(r, 0))
            for r in [*n, *(r for r in o if r not in n)]
            if o.get(r, 0) != n.get(r, 0)
        ]
    return regions, teams + per_region


@dataclass(frozen=True)
class Pool:
    """A node pool at full size, as Terraform will hold it."""

    stack: str  # the region's stack
    address: str  # google_container_node_pool.<name>, as in terraform.py's diffs
    name: str
    nodes: int
    gpus: int
    gpu_type: str
    machine_type: str
    locations: tuple[str, ...]

    def size(self) -> str:
        """ "384 nodes, 3,072 H200"."""
        nodes = f"{self.nodes:,} node{'s' if self.nodes != 1 else ''}"
        return f"{nodes}, {self.gpus:,} {short_gpu(self.gpu_type)}" if self.gpus or self.gpu_type else nodes


Pools = dict[tuple[str, str], Pool]  # (stack, address) -> pool


@dataclass(frozen=True)
class PoolChange:
    stack: str
    address: str
    before: Pool | None  # None: created
    after: Pool | None  # None: removed (terraform.py reports it)

    @property
    def lost(self) -> int:
        """GPUs of the BASE pool's type that are gone afterwards."""
        if self.before is None:
            return 0
        kept = self.after.gpus if self.after and self.after.gpu_type == self.before.gpu_type else 0
        return max(0, self.before.gpus - kept)

    @property
    def moved(self) -> bool:
        """Zones differ on both sides (a plan may not know HEAD's zones yet: no zones is no move)."""
        old, new = self.before, self.after
        return bool(old and new and old.locations and new.locations and old.locations != new.locations)

    @property
    def destructive(self) -> str:
        """The line for a pool on both sides that loses GPUs or moves; "" otherwise."""
        old, new = self.before, self.after
        if old is None or new is None or not (self.lost or (self.moved and old.gpus)):
            return ""
        zones, gpu = ", ".join(old.locations) or self.stack, short_gpu(old.gpu_type)
        where = f"moves from {zones} to {', '.join(new.locations) or self.stack}" if self.moved else f"in {zones}"
        notes = [f"-{self.lost:,} {gpu}"] if self.lost else []
        if self.moved and old.gpus > self.lost:
            notes.append(f"{old.gpus - self.lost:,} {gpu} moved")
        return f"{self.stack}: node pool {old.name} {where}: {old.size()} -> {new.size()} ({'; '.join(notes)})"


@dataclass
class Capacity:
    """What a change does to GPU capacity: per region (stack) and per node pool."""

    regions: list[Delta] = field(default_factory=list)
    pools: list[PoolChange] = field(default_factory=list)  # pools that differ

    @property
    def destructive(self) -> list[str]:
        return [c.destructive for c in self.pools if c.destructive]


def _pool(stack: str, address: str, body: dict[str, Any]) -> Pool:
    nodes, gpus, gpu_type = pool_capacity(body)
    config = nested_block(body.get("node_config"))
    return Pool(
        stack,
        address,
        str(body.get("name", address.split(".", 1)[-1])),
        nodes,
        gpus,
        gpu_type,
        str(config.get("machine_type") or ""),
        tuple(sorted(body.get("node_locations") or [])),
    )


def stack_pools(stacks: Stacks) -> Pools:
    """Every node pool of synthesized stacks (cdk.tf.json), by stack and address."""
    return {
        (stack, f"{NODE_POOL}.{name}"): _pool(stack, f"{NODE_POOL}.{name}", body)
        for stack, config in stacks.items()
        for name, body in config.get("resource", {}).get(NODE_POOL, {}).items()
    }


def plan_pools(stack: str, plan: dict[str, Any]) -> tuple[Pools, Pools]:
    """(before, after) node pools of one stack's `terraform show -json` plan: change.before, change.after."""
    sides: tuple[Pools, Pools] = ({}, {})
    for rc in plan.get("resource_changes", []):
        if rc.get("type") != NODE_POOL or rc.get("mode", "managed") != "managed":
            continue
        for side, body in zip(sides, (rc["change"].get("before"), rc["change"].get("after")), strict=True):
            if body:
                side[(stack, rc["address"])] = _pool(stack, rc["address"], body)
    return sides


def _region_gpus(pools: Pools) -> dict[str, int]:
    out: dict[str, int] = {}
    for (stack, _), pool in pools.items():
        out[stack] = out.get(stack, 0) + pool.gpus
    return out


def capacity_changes(before: Pools, after: Pools) -> Capacity:
    """Region GPU deltas (stacks that hold a pool on either side, HEAD's order first) and changed pools."""
    keys = [*after, *(k for k in before if k not in after)]
    regions = _deltas(_region_gpus(before), _region_gpus(after))
    pools = [
        PoolChange(s, a, before.get((s, a)), after.get((s, a)))
        for s, a in keys
        if before.get((s, a)) != after.get((s, a))
    ]
    return Capacity(regions, pools)


def terraform_capacity(before: Stacks, after: Stacks, plans: dict[str, dict[str, Any]] | None = None) -> Capacity:
    """Capacity from each side's synthesized stacks; a stack with a plan takes both sides from the plan."""
    old, new = stack_pools(before), stack_pools(after)
    for stack, plan in (plans or {}).items():
        planned = plan_pools(stack, plan)
        old = {k: v for k, v in old.items() if k[0] != stack} | planned[0]
        new = {k: v for k, v in new.items() if k[0] != stack} | planned[1]
    return capacity_changes(old, new)


def destructive_lines(stacks: list[StackDiff], capacity: Capacity) -> list[str]:
    """terraform.py's lines, then capacity's; a pool's move line replaces terraform's "replaces" line of it."""
    moved = {(c.stack, c.address) for c in capacity.pools if c.moved and c.destructive}
    lines = [f"{d.stack}: {r.destructive}" for d in stacks for r in d.destructive if (d.stack, r.address) not in moved]
    return lines + capacity.destructive
