"""The arithmetic a researcher should read before submitting."""

from __future__ import annotations

from gkr.resolve import Resolved


def _gib(n: int) -> str:
    return f"{n / 1024:.3g} TiB" if n >= 1024 else f"{n:,} GiB"


def summary(r: Resolved, context: str | None = None) -> str:
    """`context`: the kube context the command will use (--context, else the region's GKE context)."""
    s = r.spec
    pods, model = s.pods, r.machine.gpu_model or "GPU"
    gpus = f"{pods} pods x {s.gpus_per_pod} {model} = {r.gpus:,} GPUs" if s.gpus_per_pod else f"{pods} pods, no GPUs"
    cpus = f"{pods} x {r.cpus} CPU = {pods * r.cpus:,} CPU"
    memory = f"{pods} x {_gib(r.memory_gib)} = {_gib(pods * r.memory_gib)} requested"
    where = f"{s.kind} {s.name} -> {context or r.context} (namespace {r.namespace}, queue {r.queue}, priority {r.priority}, pool {r.pool.name})"
    extra = "" if s.kind == "job" else f"; Ray head {s.ray.head_cpus} CPU, {s.ray.head_memory_gib} GiB"
    return f"{where}\n{gpus}; {cpus}; {memory}{extra}"
