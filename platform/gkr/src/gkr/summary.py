"""The arithmetic a researcher should read before submitting."""

from __future__ import annotations

from typing import Any

from contract import names
from contract.words import count as count_of
from gkr import groups, roles
from gkr.resolved import Resolved


def _gib(n: int) -> str:
    return f"{n / 1024:.3g} TiB" if n >= 1024 else f"{n:,} GiB"


def summary(r: Resolved, context: str | None = None) -> str:
    """`context`: the kube context the command will use (--context, else the region's GKE context)."""
    s = r.spec
    # Every worker pod, the spares' too (gkr/groups.py): each takes its GPUs, CPUs and memory all the time.
    pods, model = r.worker_pods, r.machine.gpu_model or "GPU"
    own = pods * s.gpus_per_pod  # r.gpus, less an RL job's generators
    gpus = (
        f"{r.workers_text()} x {s.gpus_per_pod} {model} = {own:,} GPUs"
        if s.gpus_per_pod
        else f"{r.workers_text()}, no GPUs"
    )
    shape = groups.shape(s)
    if shape is not None and s.gpus_per_pod:
        count, size = shape
        per_pod = s.gpus_per_pod
        where = {per_pod: "one pod each"}.get(size) or (
            f"{size // per_pod} pods each" if size > per_pod else f"{per_pod // size} per pod"
        )
        gpus += f" in {count:,} replica group{'s' if count > 1 else ''} x {size:,} GPUs ({where})"
        if r.spare_pods:
            gpus += f" and {count_of(groups.spares(s), 'spare group')}"
    generators = r.generators
    if generators is not None and s.roles is not None:  # an RL job: the trainer's line above, then the generators'
        g, tp, engines = generators.spec, s.roles.generators.tensor_parallel, roles.engines(s)
        line = (
            f"{count_of(g.pods, 'pod')} x {g.gpus_per_pod} {model}"
            if g.gpus_per_pod
            else f"{count_of(g.pods, 'pod')}, no GPUs"
        )
        gpus = f"trainer {gpus}\ngenerators {line}, {engines:,} engines of {tp}; {r.gpus:,} GPUs in all"
    cpus = f"{pods} x {r.cpus} CPU = {pods * r.cpus:,} CPU"
    memory = f"{pods} x {_gib(r.memory_gib)} = {_gib(pods * r.memory_gib)} requested"
    if generators is not None:  # each role's pods have their own share of a machine
        g = generators.spec
        cpus = f"{pods * r.cpus + g.pods * generators.cpus:,} CPU"
        memory = f"{_gib(pods * r.memory_gib + g.pods * generators.memory_gib)} requested"
    where = f"{s.kind} {s.name} -> {context or r.context} (namespace {r.namespace}, queue {r.queue}, priority {r.priority}, pool {r.pool.name})"
    extra = "" if s.kind == "job" else f"; Ray head {s.ray.head_cpus} CPU, {s.ray.head_memory_gib} GiB"
    return f"{where}\n{gpus}; {cpus}; {memory}{extra}"


def run_summary(run: Any) -> str:
    """A run across regions (gkr.multiregion.Run): the Lighthouse, then each region's two lines."""
    from gkr import lighthouse

    home = run.home.resolved
    service = next(o for o in run.lighthouse if o["kind"] == "Service")
    ranges = ", ".join(service["spec"]["loadBalancerSourceRanges"])
    regions = ", ".join(f"{p.region}{' (home)' if p is run.home else ''}" for p in run.parts)
    gpus = sum(p.resolved.gpus for p in run.parts)
    head = (
        f"run {run.name} across {regions}: {gpus:,} GPUs, optimizer {run.optimizer}\n"
        f"lighthouse {lighthouse.name(run.name)} -> {home.context} (internal load balancer with global access, "
        f"port {names.LIGHTHOUSE_PORT}, from {ranges})"
    )
    return "\n".join([head, *(summary(p.resolved) for p in run.parts)])
