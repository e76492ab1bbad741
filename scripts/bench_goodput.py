"""Benchmark: the fleet goodput model's figures for the shipped fleet, what moves them, and its own speed.

    .venv/bin/python scripts/bench_goodput.py [--fleet fleet.yaml] [--days 30] [--seeds 7] [--only SECTION]

Sections:
- `table`: each job of `meridian goodput` in each row (the shipped path first), its best
  checkpoint interval found per seed: the median goodput and interval over
  the seeds (min-max beside), with Young/Daly's interval.
- `scenarios`: fleet goodput (the regional jobs) of every row when one
  assumption changes: spares, the job's restart time, healing speed, the
  trainer's restart-to-heal, the faulty-host report's wait and a replacement
  pod's start (fleet.goodput.nodeloss), Warden acting on everything, twice the
  failure rate.
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


def table(fleet_path: str, costs: Costs, days: float, seeds: Sequence[int]) -> None:
    from fleet.goodput.sweep import best, rows_of
    from fleet.load import load

    print(f"{'job':<13} {'row':<9} {'goodput median (min-max)':>26} {'interval median':>16} {'Young/Daly':>11}")
    for row in rows_of(load(fleet_path).fleet, costs):
        jobs = [*row.regional, *([row.cross] if row.cross else [])]
        for index, job in enumerate(jobs):
            per_seed = [best(job, row.costs, row.mode, days, [s + 1000 * index], kueue=row.kueue) for s in seeds]
            goodputs = [e.result.goodput for e in per_seed]
            interval = statistics.median(e.interval_s for e in per_seed)
            spread = f"{statistics.median(goodputs):.2%} ({min(goodputs):.2%}-{max(goodputs):.2%})"
            print(
                f"{job.name:<13} {row.name:<9} {spread:>26} {interval / 60:>12.0f} min"
                f" {per_seed[0].young_daly_s / 60:>7.0f} min"
            )


def scenarios(fleet_path: str, days: float, seeds: Sequence[int]) -> None:
    from fleet.goodput.report import GOAL
    from fleet.goodput.sweep import estimate, rows_of
    from fleet.load import load

    fleet = load(fleet_path).fleet
    everything = fleet.model_copy(update={"warden": fleet.warden.model_copy(update={"act_on": "all"})})
    base = Costs()
    cases: list[tuple[str, Costs, int | None, float, object]] = [
        ("as shipped (gkr's default spares)", base, None, 1.0, fleet),
        ("no spares", base, 0, 1.0, fleet),
        ("2 spares per job", base, 2, 1.0, fleet),
        (
            "restart-to-heal 4x the CPU measurement",
            replace(base, restart_to_heal_s=4 * base.restart_to_heal_s),
            None,
            1.0,
            fleet,
        ),
        ("GPU start of a group 5 min instead of 1", replace(base, gpu_group_init_s=300.0), None, 1.0, fleet),
        ("faulty-host report's operation 30 min, not 12", replace(base, faulty_report_wait_s=1800.0), None, 1.0, fleet),
        ("no wait for that report (Warden before issue 38)", replace(base, faulty_report_wait_s=0.0), None, 1.0, fleet),
        ("a replacement Ray pod 5 min to start, not 1", replace(base, pod_start_s=300.0), None, 1.0, fleet),
        ("job restart 5 min instead of 10", replace(base, job_restart_s=300.0), None, 1.0, fleet),
        ("healing at 100 Gb/s instead of 10", replace(base, heal_bytes_per_s=12.5e9), None, 1.0, fleet),
        ("Warden acts on everything (act_on: all)", base, None, 1.0, everything),
        ("a person takes 12 h instead of 4", replace(base, review_s=12 * 3600.0), None, 1.0, fleet),
        ("twice the Llama 3 failure rate", base, None, 2.0, fleet),
        (
            "staging at the H200's pinned rate (0.0194 s/GiB)",
            replace(base, staged_s_per_gib=H200_PINNED_S_PER_GIB),
            None,
            1.0,
            fleet,
        ),
    ]
    names = [r.name for r in rows_of(fleet, base)]
    print(f"{'scenario':<52}" + "".join(f"{n:>10}" for n in names))
    for name, costs, spares, scale, spec in cases:
        rows = [replace(r, cross=None) for r in rows_of(spec, costs, spares=spares)]  # type: ignore[arg-type]
        est = estimate(rows, days, seeds, failure_scale=scale)
        print(f"{name:<52}" + "".join(f"{est.goodput(n):>10.2%}" for n in names))
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


def speed(fleet_path: str, costs: Costs, days: float) -> None:
    from fleet.goodput.simulate import MODES
    from fleet.goodput.sweep import estimate, rows_of, run_of
    from fleet.load import load

    rows = rows_of(load(fleet_path).fleet, costs)
    job = rows[0].cross or rows[0].regional[0]
    for mode in MODES:
        one = _timed(partial(_many, job, run_of(costs, mode, 1800.0, days)), 5) / 20
        print(f"one simulation of {job.name} ({job.gpus:,} GPUs, {days:g} days, {mode}): {one * 1e3:.2f} ms median")
    whole = _timed(lambda: estimate(rows, days, range(5)), 3)
    print(f"`meridian goodput` estimate ({len(rows)} rows x 4 jobs x 33 intervals x 5 seeds): {whole:.2f} s median")


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
    sections: dict[str, Callable[[], None]] = {
        "table": lambda: table(args.fleet, costs, args.days, seeds),
        "scenarios": lambda: scenarios(args.fleet, args.days, seeds),
        "speed": lambda: speed(args.fleet, costs, args.days),
    }
    for name, section in sections.items():
        if args.only in (None, name):
            print(f"== {name}")
            section()


if __name__ == "__main__":
    main()
