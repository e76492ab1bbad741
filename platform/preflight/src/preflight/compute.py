"""Matrix-multiply throughput of every visible GPU (or the CPU, for tests), with PyTorch."""

from __future__ import annotations

import time
from dataclasses import dataclass

from preflight.report import Result


@dataclass(frozen=True)
class ComputeSettings:
    min_tflops: float | None  # per device, from the fleet catalog; None reports without judging
    size: int = 8192
    iterations: int = 20
    cpu: bool = False  # tiny CPU mode for tests and machines without GPUs


def measure_tflops(device: str, size: int, iterations: int, dtype_name: str) -> float:
    import torch

    dtype = getattr(torch, dtype_name)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)

    for _ in range(2):  # warm-up: kernels chosen, clocks up
        a @ b
    sync()
    start = time.perf_counter()
    for _ in range(iterations):
        a @ b
    sync()
    elapsed = time.perf_counter() - start
    return 2 * size**3 * iterations / elapsed / 1e12


def check_compute(settings: ComputeSettings) -> Result:
    try:
        import torch
    except ImportError:
        return Result("compute", "error", "PyTorch is not installed in this image")
    if settings.cpu:
        devices, dtype = ["cpu"], "float32"
    elif torch.cuda.is_available():
        devices, dtype = [f"cuda:{i}" for i in range(torch.cuda.device_count())], "bfloat16"
    else:
        return Result("compute", "error", "no CUDA device visible; use --cpu for the CPU mode")
    measured = {device: measure_tflops(device, settings.size, settings.iterations, dtype) for device in devices}
    evidence = [
        f"{device}: {tflops:.3f} TFLOPS ({dtype} {settings.size}x{settings.size})"
        for device, tflops in measured.items()
    ]
    low = min(measured, key=lambda d: measured[d])
    if settings.min_tflops is not None and measured[low] < settings.min_tflops:
        return Result("compute", "fail", f"{low}: {measured[low]:.3f} TFLOPS, below {settings.min_tflops:g}", evidence)
    threshold = f"threshold {settings.min_tflops:g}" if settings.min_tflops is not None else "no threshold given"
    return Result(
        "compute", "pass", f"{len(measured)} device(s) at >= {measured[low]:.3f} TFLOPS ({threshold})", evidence
    )
