"""Averages over seeds, the checkpoint interval that maximizes goodput, and Young/Daly's for comparison."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from fleet.goodput.costs import Costs
from fleet.goodput.jobs import Job
from fleet.goodput.simulate import BUCKETS, MODES, Mode, Result, Run, interruptions_per_node_second, simulate

# Checkpoint intervals tried: 5 minutes to 21 hours, four to a doubling.
INTERVALS: tuple[float, ...] = tuple(300.0 * 2 ** (k / 4) for k in range(33))


def run_of(costs: Costs, mode: Mode, interval_s: float, days: float, failure_scale: float = 1.0) -> Run:
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
    )


def mean(job: Job, run: Run, seeds: Sequence[int]) -> Result:
    """The buckets averaged over `seeds` (interruptions summed)."""
    results = [simulate(job, run, s) for s in seeds]
    buckets = {b: sum(r.buckets[b] for r in results) / len(results) for b in BUCKETS}
    return Result(results[0].paid, buckets, sum((r.interruptions for r in results), Counter()))


def young_daly_s(blocked_s: float, mtbf_s: float) -> float:
    """Young's first-order optimum checkpoint interval, sqrt(2 C M) (Young 1974; Daly 2006)."""
    return math.sqrt(2 * blocked_s * mtbf_s)


def mtbf_s(job: Job, mode: Mode, failure_scale: float = 1.0) -> float:
    """Mean time between interruptions that roll the whole job back to its checkpoint."""
    rate = interruptions_per_node_second(job, mode) * job.target * failure_scale
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
) -> Estimate:
    """The checkpoint interval that maximizes the job's mean goodput, and the goodput there."""
    scored = [(mean(job, run_of(costs, mode, i, days, failure_scale), seeds), i) for i in intervals]
    result, interval = max(scored, key=lambda ri: (ri[0].goodput, -ri[1]))
    yd = young_daly_s(costs.blocked_s, mtbf_s(job, mode, failure_scale))
    return Estimate(job, mode, interval, yd, result, len(seeds))


def fleet_goodput(estimates: Sequence[Estimate]) -> float:
    """Productive over paid GPU-seconds, summed over jobs."""
    paid = sum(e.result.paid for e in estimates)
    return sum(e.result.buckets["productive"] for e in estimates) / paid if paid else 0.0


@dataclass(frozen=True)
class FleetEstimate:
    days: float
    seeds: tuple[int, ...]
    costs: Costs
    regional: dict[Mode, list[Estimate]]  # one job per region, disjoint pools
    cross: dict[Mode, Estimate]  # the cross-region job instead (empty for one region)

    def goodput(self, mode: Mode) -> float:
        return fleet_goodput(self.regional[mode])


def estimate(
    regional: Sequence[Job],
    cross: Job | None,
    costs: Costs,
    days: float,
    seeds: Sequence[int],
    failure_scale: float = 1.0,
) -> FleetEstimate:
    """Every job under both recovery modes, each at its best checkpoint interval.

    Each job draws its own failures (its seeds offset by its position), so equal jobs are independent samples.
    """

    def seeds_of(index: int) -> list[int]:
        return [s + 1000 * index for s in seeds]

    per_mode: dict[Mode, list[Estimate]] = {
        mode: [best(j, costs, mode, days, seeds_of(i), failure_scale) for i, j in enumerate(regional)] for mode in MODES
    }
    crossed = (
        {} if cross is None else {m: best(cross, costs, m, days, seeds_of(len(regional)), failure_scale) for m in MODES}
    )
    return FleetEstimate(days, tuple(seeds), costs, per_mode, crossed)
