"""Benchmark: the fleet goodput model's figures for the shipped fleet, what moves them, and its own speed.

    .venv/bin/python scripts/bench_goodput.py [--fleet fleet.yaml] [--days 30] [--seeds 7] [--only SECTION]

Sections:
- `table`: each job of `meridian goodput` under both recovery modes, its best
  checkpoint interval found per seed: the median goodput and interval over
  the seeds (min-max beside), with Young/Daly's interval.
- `scenarios`: fleet goodput (the regional jobs) when one assumption
  changes: spare nodes, the job's restart time, healing speed, Warden in dry
  run (every repair waits for a person), twice the failure rate.
- `speed`: simulations per second for the largest job, and one whole
  `meridian goodput` estimate.
- `staging` (needs torch and a CUDA device): the rate at which a rank's
  shards are copied from the GPU to host memory, pinned and pageable, which
  is what blocks training per checkpoint on a GPU (the model's default,
  0.118 s/GiB, is the trainer's CPU measurement).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

from fleet.goodput.costs import GIB, Costs  # the contract and the standard library only: `staging` runs anywhere

# `--only staging` on one H200 (device machine, 2026-12-01): pinned 51.4 GiB/s, pageable 14.9 GiB/s.
H200_PINNED_S_PER_GIB = 0.0194

if TYPE_CHECKING:
    from fleet.goodput.jobs import Job
    from fleet.goodput.simulate import Run


def table(regional: list[Job], cross: Job | None, costs: Costs, days: float, seeds: Sequence[int]) -> None:
    from fleet.goodput.simulate import MODES
    from fleet.goodput.sweep import best

    print(f"{'job':<13} {'mode':<8} {'goodput median (min-max)':>26} {'interval median':>16} {'Young/Daly':>11}")
    for index, job in enumerate([*regional, *([cross] if cross else [])]):
        for mode in MODES:
            per_seed = [best(job, costs, mode, days, [s + 1000 * index]) for s in seeds]  # as `estimate` does
            goodputs = [e.result.goodput for e in per_seed]
            interval = statistics.median(e.interval_s for e in per_seed)
            spread = f"{statistics.median(goodputs):.2%} ({min(goodputs):.2%}-{max(goodputs):.2%})"
            print(
                f"{job.name:<13} {mode:<8} {spread:>26} {interval / 60:>12.0f} min"
                f" {per_seed[0].young_daly_s / 60:>7.0f} min"
            )


def scenarios(fleet_path: str, days: float, seeds: Sequence[int]) -> None:
    from fleet.goodput.jobs import jobs_of
    from fleet.goodput.report import GOAL
    from fleet.goodput.simulate import MODES
    from fleet.goodput.sweep import estimate
    from fleet.load import load

    fleet = load(fleet_path).fleet
    base = Costs()
    cases: list[tuple[str, Costs, int, float]] = [
        ("as modelled (no spares)", base, 0, 1.0),
        ("1 spare node per pool", base, 1, 1.0),
        ("2 spare nodes per pool", base, 2, 1.0),
        ("job restart 5 min instead of 10", replace(base, job_restart_s=300.0), 0, 1.0),
        ("job restart 20 min", replace(base, job_restart_s=1200.0), 0, 1.0),
        ("healing at 100 Gb/s instead of 10", replace(base, heal_bytes_per_s=12.5e9), 0, 1.0),
        ("Warden in dry run (fleet.yaml ships dry_run: true)", replace(base, warden_acts=False), 0, 1.0),
        ("twice the Llama 3 failure rate", base, 0, 2.0),
        (
            "staging at the H200's pinned rate (0.0194 s/GiB)",
            replace(base, staged_s_per_gib=H200_PINNED_S_PER_GIB),
            0,
            1.0,
        ),
        ("checkpoints durable 4x sooner", replace(base, durable_s_per_gib=base.durable_s_per_gib / 4), 0, 1.0),
        (
            "1 spare, 5 min restart, durable 4x sooner",
            replace(base, job_restart_s=300.0, durable_s_per_gib=base.durable_s_per_gib / 4),
            1,
            1.0,
        ),
    ]
    print(f"{'scenario':<52} {'restart':>8} {'live':>8}")
    for name, costs, spares, scale in cases:
        regional, _ = jobs_of(fleet, costs, spares=spares)
        est = estimate(regional, None, costs, days, seeds, failure_scale=scale)
        cells = "".join(f"{est.goodput(m):>9.2%}" for m in MODES)
        print(f"{name:<52}{cells}")
    print(f"(goal: {GOAL:.0%})")


def _timed(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _many(job: Job, run: Run) -> None:
    from fleet.goodput.simulate import simulate

    for seed in range(20):
        simulate(job, run, seed)


def speed(regional: list[Job], cross: Job | None, costs: Costs, days: float) -> None:
    from fleet.goodput.simulate import MODES
    from fleet.goodput.sweep import estimate, run_of

    job = cross or regional[0]
    for mode in MODES:
        one = _timed(partial(_many, job, run_of(costs, mode, 1800.0, days)), 5) / 20
        print(f"one simulation of {job.name} ({job.gpus:,} GPUs, {days:g} days, {mode}): {one * 1e3:.2f} ms median")
    whole = _timed(lambda: estimate(regional, cross, costs, days, range(5)), 3)
    print(f"`meridian goodput` estimate (4 jobs x 2 modes x 33 intervals x 5 seeds): {whole:.2f} s median")


def staging(costs: Costs) -> None:
    import torch  # only this section needs it

    if not torch.cuda.is_available():
        print("staging: no CUDA device here; skipped")
        return
    size = 8 * GIB  # a slice of a rank's 98.6 GiB, copied as one tensor
    src = torch.empty(size // 2, dtype=torch.bfloat16, device="cuda").normal_()
    for pinned in (True, False):
        dst = torch.empty(size // 2, dtype=torch.bfloat16, pin_memory=pinned)
        dst.copy_(src, non_blocking=pinned)  # warm-up: first touch of the host pages
        torch.cuda.synchronize()
        seconds = []
        for _ in range(5):
            start = time.perf_counter()
            dst.copy_(src, non_blocking=pinned)
            torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
        per_gib = statistics.median(seconds) / (size / GIB)
        kind = "pinned" if pinned else "pageable"
        print(
            f"staging {torch.cuda.get_device_name()}: GPU -> {kind} host {size / per_gib / size:.1f} GiB/s"
            f" ({per_gib:.4f} s/GiB; a rank's {costs.state_gib_per_gpu:.1f} GiB in"
            f" {per_gib * costs.state_gib_per_gpu:.1f} s)"
        )
        del dst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleet", default="fleet.yaml")
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--seeds", type=int, default=7)
    parser.add_argument("--only", choices=("table", "scenarios", "speed", "staging"))
    args = parser.parse_args()
    costs = Costs()
    seeds = range(args.seeds)
    if args.only == "staging":
        staging(costs)
        return
    from fleet.goodput.jobs import jobs_of
    from fleet.load import load

    regional, cross = jobs_of(load(args.fleet).fleet, costs)
    sections: dict[str, Callable[[], None]] = {
        "table": lambda: table(regional, cross, costs, args.days, seeds),
        "scenarios": lambda: scenarios(args.fleet, args.days, seeds),
        "speed": lambda: speed(regional, cross, costs, args.days),
    }
    for name, section in sections.items():
        if args.only in (None, name):
            print(f"== {name}")
            section()


if __name__ == "__main__":
    main()
