"""All-reduce across the job's processes, measured and reported the way nccl-tests does.

algbw = bytes / time; busbw = algbw x 2(n-1)/n for all-reduce (the share of
data each rank's links carry), so busbw is comparable across world sizes.
Runs with torch.distributed's env:// rendezvous (MASTER_ADDR, MASTER_PORT,
RANK, WORLD_SIZE), NCCL on GPUs and gloo on CPUs.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from preflight.report import Result


@dataclass(frozen=True)
class CollectiveSettings:
    min_busbw_gbps: float | None  # GB/s at the largest size; None reports without judging
    sizes: tuple[int, ...] = (1 << 20, 16 << 20, 256 << 20)  # bytes
    iterations: int = 10
    backend: str | None = None  # nccl on GPUs, gloo otherwise


@dataclass(frozen=True)
class Measurement:
    size: int
    time_s: float
    algbw: float  # GB/s
    busbw: float  # GB/s


def bus_bandwidth(size: int, seconds: float, world: int) -> tuple[float, float]:
    algbw = size / seconds / 1e9
    return algbw, algbw * 2 * (world - 1) / world


def measure(settings: CollectiveSettings) -> tuple[list[Measurement], str, int]:
    import torch
    import torch.distributed as dist

    backend = settings.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method="env://")
    try:
        world = dist.get_world_size()
        results = []
        for size in settings.sizes:
            tensor = torch.ones(size // 4, dtype=torch.float32, device=device)
            for _ in range(2):
                dist.all_reduce(tensor)
            if backend == "nccl":
                torch.cuda.synchronize(device)
            dist.barrier()
            start = time.perf_counter()
            for _ in range(settings.iterations):
                dist.all_reduce(tensor)
            if backend == "nccl":
                torch.cuda.synchronize(device)
            elapsed = (time.perf_counter() - start) / settings.iterations
            # The slowest rank decides, as in nccl-tests.
            slowest = torch.tensor([elapsed], dtype=torch.float64, device=device)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            seconds = float(slowest.item())
            results.append(Measurement(size, seconds, *bus_bandwidth(size, seconds, world)))
        return results, backend, world
    finally:
        dist.destroy_process_group()


def table(measurements: list[Measurement]) -> list[str]:
    rows = [
        f"{'size(B)':>12} {'count':>10} {'type':>6} {'redop':>6} {'time(us)':>10} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12}"
    ]
    rows += [
        f"{m.size:>12} {m.size // 4:>10} {'float':>6} {'sum':>6} {m.time_s * 1e6:>10.1f} {m.algbw:>12.3f} {m.busbw:>12.3f}"
        for m in measurements
    ]
    return rows


def judge(
    measurements: list[Measurement],
    backend: str,
    world: int,
    settings: CollectiveSettings,
    name: str = "allreduce",
    ranks: str | None = None,
) -> Result:
    """busbw at the largest size against the floor; `name` and `ranks` ("2 nodes x 8 ranks") for other callers."""
    peak = measurements[-1]
    summary = f"{ranks or f'{world} ranks'} over {backend}: busbw {peak.busbw:.2f} GB/s at {peak.size >> 20} MiB"
    evidence = table(measurements)
    if settings.min_busbw_gbps is not None and peak.busbw < settings.min_busbw_gbps:
        return Result(name, "fail", f"{summary}, below {settings.min_busbw_gbps:g} GB/s", evidence)
    threshold = (
        f" (threshold {settings.min_busbw_gbps:g} GB/s)"
        if settings.min_busbw_gbps is not None
        else " (no threshold given)"
    )
    return Result(name, "pass", summary + threshold, evidence)


def check_allreduce(settings: CollectiveSettings) -> Result:
    rendezvous = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")
    missing = [k for k in rendezvous if k not in os.environ]
    if len(missing) == len(rendezvous):
        return Result(
            "allreduce", "skip", "a single process: no rendezvous (MASTER_ADDR, RANK, WORLD_SIZE) to test across"
        )
    if missing:
        return Result("allreduce", "error", f"no rendezvous: {', '.join(missing)} unset (gkr sets them for every pod)")
    try:
        measurements, backend, world = measure(settings)
    except ImportError:
        return Result("allreduce", "error", "PyTorch is not installed in this image")
    except (RuntimeError, ValueError) as exc:
        return Result("allreduce", "error", f"all-reduce could not run: {str(exc).splitlines()[0]}")
    return judge(measurements, backend, world, settings)
