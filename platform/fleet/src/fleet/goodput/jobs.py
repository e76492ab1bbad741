"""The jobs the model runs: the shipped fleet's largest, with Warden's policy for their pools.

One job per region on its largest GPU pool (every node of it: the fleet
keeps no spare nodes unless asked), and one cross-region job over those
same pools (DiLoCo's case): an alternative to the three, not added to them.
Warden's policy is the config `make generate` writes for each cluster
(fleet.gitops.warden.config), not numbers restated here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from contract import spares as spare_rule
from contract.problem import Invalid
from contract.warden import Config
from fleet.gitops.warden import config as warden_config
from fleet.goodput.costs import Costs, repair_s, slots
from fleet.goodput.failures import CAUSES, Cause, Scope
from fleet.goodput.nodeloss import kueue_failed_s
from fleet.model import Fleet, GpuPool, Region

CROSS_REGION = "cross-region"


@dataclass(frozen=True)
class Effect:
    """What one cause does to a job: whom it stops, and how long its node is out of service."""

    cause: Cause
    scope: Scope
    repair_s: float
    # The host is gone (NotReady): Ray learns of it from its health checks, not from a process exit.
    vanishes: bool = False
    # When Kueue marks the node failed for the job's TAS assignment, after the failure; None: the node stays
    # in service (fleet.goodput.nodeloss: a vanished host once its pod is evicted, a repaired one at its drain).
    kueue_s: float | None = None


@dataclass(frozen=True)
class Job:
    name: str
    pools: tuple[str, ...]  # region/pool
    nodes: int  # paid: every node of its pools
    spares: int  # of them, kept out of the job to stand in for a failed one
    gpus_per_node: int
    slots: int  # nodes Warden repairs at once across its pools
    effects: tuple[Effect, ...]
    pool_nodes: tuple[int, ...] = ()  # nodes per pool (one Kueue Workload each); () for one pool of all

    @property
    def target(self) -> int:
        """Nodes (one replica group each) the job trains on when nothing is broken."""
        return self.nodes - self.spares

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


def largest_pool(region: Region) -> GpuPool | None:
    """The region's GPU pool with the most GPUs (the first of equals); None without GPU pools."""
    pools = [p for p in region.gpu_pools if p.machine.gpus]
    return max(pools, key=lambda p: p.nodes * p.machine.gpus, default=None)


def _job(
    fleet: Fleet, name: str, placed: list[tuple[Region, GpuPool]], costs: Costs, spares: int | None, dry_run: bool
) -> Job:
    config = warden_config(fleet, placed[0][0])  # one `warden:` section for the fleet: the same policy everywhere
    if dry_run:
        config = replace(config, dry_run=True)
    nodes = sum(p.nodes for _, p in placed)
    # One replica group per node, the spares among them. Each region's RayJob holds its own (gkr's multiregion):
    # `spares` in each pool, or by default what gkr holds for the run the pool's nodes make.
    held = sum(spare_rule.held_by_default(p.nodes) if spares is None else spares for _, p in placed)
    return Job(
        name=name,
        pools=tuple(f"{r.name}/{p.name}" for r, p in placed),
        nodes=nodes,
        spares=held,
        gpus_per_node=placed[0][1].machine.gpus,
        slots=sum(slots(warden_config(fleet, r), p.nodes) for r, p in placed),
        effects=tuple(effect(c, config, costs) for c in CAUSES),
        pool_nodes=tuple(p.nodes for _, p in placed),
    )


def effect(cause: Cause, config: Config, costs: Costs) -> Effect:
    """A cause under Warden's policy: its node's repair, and when Kueue sees the node as failed."""
    repair = repair_s(cause, config, costs)
    return Effect(cause, cause.scope, repair, cause.signal == "not_ready", kueue_failed_s(cause, config, costs))


def jobs_of(fleet: Fleet, costs: Costs, spares: int | None = 0, dry_run: bool = False) -> tuple[list[Job], Job | None]:
    """The per-region jobs (disjoint pools), and the cross-region job over the same pools (None for one region).

    `spares`: per pool, or None for gkr's default (contract.spares); `dry_run`: Warden decides and only logs.
    """
    placed = [(r, p) for r in fleet.regions if (p := largest_pool(r)) is not None]
    if spares is not None:
        for region, pool in placed:
            if (problem := spare_rule.problem_among(spares, pool.nodes)) is not None:
                raise Invalid([f"--spares: pool {region.name}/{pool.name}: {problem}"])
    regional = [_job(fleet, r.name, [(r, p)], costs, spares, dry_run) for r, p in placed]
    cross = _job(fleet, CROSS_REGION, placed, costs, spares, dry_run) if len(placed) > 1 else None
    return regional, cross
