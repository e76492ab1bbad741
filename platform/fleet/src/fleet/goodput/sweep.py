"""Averages over seeds, the checkpoint interval that maximizes goodput, and Young/Daly's for comparison."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from contract.warden import Config
from fleet.gitops.warden import config as warden_config
from fleet.goodput.costs import Costs
from fleet.goodput.jobs import Job, jobs_of
from fleet.goodput.nodeloss import NodeLoss, vanished_host
from fleet.goodput.simulate import BUCKETS, Kueue, Mode, Result, Run, interruptions_per_node_second, simulate
from fleet.model import Fleet

# Checkpoint intervals tried: 5 minutes to 21 hours, four to a doubling.
INTERVALS: tuple[float, ...] = tuple(300.0 * 2 ** (k / 4) for k in range(33))


def run_of(
    costs: Costs, mode: Mode, interval_s: float, days: float, failure_scale: float = 1.0, kueue: Kueue = "none"
) -> Run:
    """`kueue`: a RayJob under Kueue (fleet.goodput.nodeloss), which also brings Ray's detection of a vanished
    host and a repaired node's new Ray worker pod into the run."""
    ray = kueue != "none"
    return Run(
        mode=mode,
        interval_s=interval_s,
        blocked_s=costs.blocked_s,
        durable_lag_s=costs.durable_lag_s,
        detect_s=costs.detect_s,
        heal_s=costs.heal_s,
        job_restart_s=costs.job_restart_s,
        period_s=days * 86_400.0,
        failure_scale=failure_scale,
        kueue=kueue,
        ray_detect_s=costs.ray_node_death_s if ray else 0.0,
        rejoin_s=costs.rejoin_s if ray else 0.0,
    )


def mean(job: Job, run: Run, seeds: Sequence[int]) -> Result:
    """The buckets averaged over `seeds` (interruptions summed)."""
    results = [simulate(job, run, s) for s in seeds]
    buckets = {b: sum(r.buckets[b] for r in results) / len(results) for b in BUCKETS}
    return Result(results[0].paid, buckets, sum((r.interruptions for r in results), Counter()))


def young_daly_s(blocked_s: float, mtbf_s: float) -> float:
    """Young's first-order optimum checkpoint interval, sqrt(2 C M) (Young 1974; Daly 2006)."""
    return math.sqrt(2 * blocked_s * mtbf_s)


def mtbf_s(job: Job, mode: Mode, failure_scale: float = 1.0, kueue: Kueue = "none") -> float:
    """Mean time between interruptions that roll the whole job back to its checkpoint."""
    rate = interruptions_per_node_second(job, mode, kueue) * job.target * failure_scale
    return math.inf if rate == 0 else 1 / rate


@dataclass(frozen=True)
class Estimate:
    job: Job
    mode: Mode
    interval_s: float  # the interval of INTERVALS with the highest mean goodput
    young_daly_s: float
    result: Result  # at that interval, averaged over the seeds
    seeds: int

    @property
    def interruptions_per_day(self) -> float:
        return sum(self.result.interruptions.values()) / self.seeds / (self.result.paid / self.job.gpus / 86_400)


def best(
    job: Job,
    costs: Costs,
    mode: Mode,
    days: float,
    seeds: Sequence[int],
    failure_scale: float = 1.0,
    intervals: Sequence[float] = INTERVALS,
    kueue: Kueue = "none",
) -> Estimate:
    """The checkpoint interval that maximizes the job's mean goodput, and the goodput there."""
    scored = [(mean(job, run_of(costs, mode, i, days, failure_scale, kueue), seeds), i) for i in intervals]
    result, interval = max(scored, key=lambda ri: (ri[0].goodput, -ri[1]))
    yd = young_daly_s(costs.blocked_s, mtbf_s(job, mode, failure_scale, kueue))
    return Estimate(job, mode, interval, yd, result, len(seeds))


def fleet_goodput(estimates: Sequence[Estimate]) -> float:
    """Productive over paid GPU-seconds, summed over jobs."""
    paid = sum(e.result.paid for e in estimates)
    return sum(e.result.buckets["productive"] for e in estimates) / paid if paid else 0.0


SHIPPED = "shipped"
FAIL_FAST = "fail-fast"


@dataclass(frozen=True)
class Row:
    """One line of the table: a recovery path, its jobs (spares, Warden's policy) and its costs."""

    name: str  # the table's short name
    title: str  # what it stands for, in full
    mode: Mode  # how the simulation recovers
    costs: Costs
    regional: tuple[Job, ...]
    cross: Job | None
    kueue: Kueue = "none"  # a RayJob under Kueue: what Kueue does with a failed node (fleet.goodput.nodeloss)


def rows_of(fleet: Fleet, costs: Costs, spares: int | None = None) -> list[Row]:
    """The shipped path first, then the comparisons: the shipped path under Kueue's default FailFast (before
    issue 38), the Ray path before issue 28, torchft under the local launcher, and the Ray path with Warden
    in dry run (what fleet.yaml shipped before issue 28).

    `spares`: per pool for the shipped path; None is what gkr holds by default (contract.spares).
    """
    shipped, shipped_cross = jobs_of(fleet, costs, spares=spares)
    plain, plain_cross = jobs_of(fleet, costs, spares=0)
    dry, dry_cross = jobs_of(fleet, costs, spares=0, dry_run=True)
    policy = warden_config(fleet, fleet.regions[0])
    warden = "dry run" if policy.dry_run else f"acts on {policy.act_on}"
    held = "/".join(str(j.spares) for j in shipped)
    # The supervisor's replacement group needs no new pod: its recovery is the measured restart-to-heal.
    supervised = replace(costs, group_restart_s=costs.restart_to_heal_s + costs.gpu_group_init_s)
    fail_fast = (
        "fail-fast: shipped, but with Kueue's default TASFailedNodeReplacementFailFast (before issue 38):"
        " a node leaving the RayJob evicts it"
    )
    return [
        Row(
            SHIPPED,
            f"shipped: gkr -> RayJob -> per-group supervisor, spares {held}, Warden {warden},"
            " Kueue's failed-node replacement without FailFast",
            "live",
            supervised,
            tuple(shipped),
            shipped_cross,
            "hot-swap",
        ),
        Row(FAIL_FAST, fail_fast, "live", supervised, tuple(shipped), shipped_cross, "fail-fast"),
        Row(
            "restart",
            "restart: any failure restarts the whole job (the Ray path before issue 28)",
            "restart",
            costs,
            tuple(plain),
            plain_cross,
        ),
        Row(
            "live",
            "live: only the failed group restarts, its pods on the same or a repaired node (local launcher)",
            "live",
            costs,
            tuple(plain),
            plain_cross,
        ),
        Row(
            "dry-run",
            "dry-run: restart, with Warden in dry run (fleet.yaml before issue 28)",
            "restart",
            costs,
            tuple(dry),
            dry_cross,
        ),
    ]


@dataclass(frozen=True)
class FleetEstimate:
    days: float
    seeds: tuple[int, ...]
    costs: Costs  # the shipped path's
    rows: tuple[Row, ...]
    regional: dict[str, list[Estimate]]  # by row name: one job per region, disjoint pools
    cross: dict[str, Estimate]  # the cross-region job instead (empty for one region)
    node_loss: NodeLoss  # a vanished host under the shipped path, stage by stage

    def goodput(self, row: str) -> float:
        return fleet_goodput(self.regional[row])


def estimate(
    rows: Sequence[Row], days: float, seeds: Sequence[int], failure_scale: float = 1.0, policy: Config | None = None
) -> FleetEstimate:
    """Every row's jobs, each at its best checkpoint interval.

    Each job draws its own failures (its seeds offset by its position), so equal jobs are independent samples,
    and the same job draws the same failures in every row (common random numbers). `policy`: Warden's, for the
    node-loss path's account (its default config when not given).
    """

    def seeds_of(index: int) -> list[int]:
        return [s + 1000 * index for s in seeds]

    regional = {
        r.name: [
            best(j, r.costs, r.mode, days, seeds_of(i), failure_scale, kueue=r.kueue) for i, j in enumerate(r.regional)
        ]
        for r in rows
    }
    cross = {
        r.name: best(r.cross, r.costs, r.mode, days, seeds_of(len(r.regional)), failure_scale, kueue=r.kueue)
        for r in rows
        if r.cross is not None
    }
    path = vanished_host(rows[0].costs, policy or Config())
    return FleetEstimate(days, tuple(seeds), rows[0].costs, tuple(rows), regional, cross, path)
