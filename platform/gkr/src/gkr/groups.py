"""How a job's GPUs form the trainer's replica groups: pods x gpus_per_pod = replica_groups x group_size.

A group is one rank per GPU; FSDP shards the model over the group's ranks, torchft keeps
groups alive independently of each other. A group's ranks should share one node's NVLink or
take whole nodes over RDMA, so a group either fits in one pod or is whole pods: never part
of two (its all-gathers would cross the slow link for some ranks and not others, and one
pod's failure would take two groups down).

Neither field set: gkr says nothing and the trainer's own config decides (ft.replica_groups),
as before. Pure: checks.py calls it once the pod shape itself is known to be sound.

Spare groups (issue 28, `spare_groups`): idle Ray workers, a replica group's worth each, in the
RayJob's one worker group, so Kueue admits them with the run as one gang and a replacement never
queues; the trainer's per-group supervisor starts a failed group's replacement on them
(`ft.spare_groups`, appended to the trainer's command). The default is contract.spares'.
"""

from __future__ import annotations

import math

from contract import spares as spare_rule
from contract.problem import Problem
from gkr.spec import JobSpec

TRAINER_ON_RAY = "run.launcher=ray"  # the trainer's Ray path, the one that uses spare workers
SPARE_OVERRIDE = "ft.spare_groups="


def shape(spec: JobSpec) -> tuple[int, int] | None:
    """(replica groups, ranks per group) the job asks for, or None when it leaves it to the trainer."""
    gpus = spec.pods * spec.gpus_per_pod
    if spec.group_size is not None:
        return gpus // spec.group_size, spec.group_size
    if spec.replica_groups is not None:
        return spec.replica_groups, gpus // spec.replica_groups
    return None


def sizes(pods: int, gpus_per_pod: int) -> list[int]:
    """Every group size that tiles the job: a divisor of a pod's GPUs, or a whole number of pods dividing `pods`."""
    within = [d for d in range(1, gpus_per_pod + 1) if gpus_per_pod % d == 0]
    return sorted({*within, *(gpus_per_pod * k for k in _divisors(pods))})


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def _listed(values: list[int]) -> str:
    text = [f"{v:,}" for v in values]
    return text[0] if len(text) == 1 else f"{', '.join(text[:-1])} or {text[-1]}"


def problems(spec: JobSpec) -> list[Problem]:
    """One line for a shape that does not tile the job's GPUs (the pod shape is already checked)."""
    if spec.replica_groups is None and spec.group_size is None:
        return []
    field = "group_size" if spec.group_size is not None else "replica_groups"
    if spec.gpus_per_pod == 0:
        return [
            Problem(
                path=(field,),
                message="replica groups are made of GPUs (one rank each) and this job has gpus_per_pod 0; "
                f"drop {field} or ask for GPUs",
            )
        ]
    pods, per_pod = spec.pods, spec.gpus_per_pod
    gpus = pods * per_pod
    job = f"the {gpus:,} GPUs of {pods:,} pods x {per_pod}"
    ok = sizes(pods, per_pod)
    count, size = spec.replica_groups, spec.group_size
    if count is not None and size is not None and count * size != gpus:
        return [
            Problem(
                path=("group_size",),
                message=f"replica_groups {count:,} x group_size {size:,} = {count * size:,}, not {job}; set only one of them",
            )
        ]
    if size is not None:
        if gpus % size:
            return [
                Problem(path=("group_size",), message=f"group_size {size:,} does not divide {job}; use {_listed(ok)}")
            ]
        if size not in ok:
            return [Problem(path=("group_size",), message=f"group_size {size:,} {_split(per_pod)}; use {_listed(ok)}")]
        return []
    count = count or 1
    counts = sorted(gpus // s for s in ok)
    if gpus % count:
        return [
            Problem(
                path=("replica_groups",), message=f"{count:,} replica groups do not divide {job}; use {_listed(counts)}"
            )
        ]
    if count not in counts:
        size = gpus // count
        return [
            Problem(
                path=("replica_groups",),
                message=f"{count:,} replica groups of {size:,} GPUs: a group of {size:,} {_split(per_pod)}; "
                f"use {_listed(counts)}",
            )
        ]
    return []


def _split(per_pod: int) -> str:
    """Why a size that divides the job's GPUs is still refused: it cuts pods apart."""
    return (
        f"would take part of two pods of {per_pod} GPUs; a group must fit in one pod or be whole pods, "
        "since FSDP inside a group wants its ranks on one node's NVLink or whole nodes over RDMA"
    )


def _on_ray(spec: JobSpec) -> bool:
    words = spec.command.split() if isinstance(spec.command, str) else spec.command or ()
    return spec.kind == "rayjob" and TRAINER_ON_RAY in words


def spares(spec: JobSpec) -> int:
    """Spare replica groups the run holds: the job's `spare_groups`, else contract.spares' default for
    the trainer on Ray with a known shape (any other job has nothing that would use them)."""
    if spec.spare_groups is not None:
        return spec.spare_groups
    found = shape(spec)
    return spare_rule.default_spare_groups(found[0]) if found is not None and _on_ray(spec) else 0


def spare_pods(spec: JobSpec) -> int:
    """Worker pods the spares take (contract.spares.pods); 0 for spares the checks refuse: that refusal is
    the job's one line, and the quota and the pool are checked without them."""
    found = shape(spec)
    count = spares(spec)
    if found is None or count == 0 or spare_problems(spec):
        return 0
    return spare_rule.pods(count, found[1], spec.gpus_per_pod)


def spare_problems(spec: JobSpec) -> list[Problem]:
    """One line for a `spare_groups` nothing would use, or one out of contract.spares' bounds."""
    where = ("spare_groups",)
    parts = [spec.command] if isinstance(spec.command, str) else spec.command or ()
    if any(SPARE_OVERRIDE in part for part in parts):
        return [
            Problem(path=("command",), message=f"sets {SPARE_OVERRIDE}...; gkr sets it from the job: use spare_groups")
        ]
    if not spec.spare_groups:
        return []
    if not _on_ray(spec):
        return [
            Problem(
                path=where,
                message=f"spare workers are used by the trainer on Ray (a rayjob whose command has {TRAINER_ON_RAY}); "
                "set spare_groups: 0 or run the trainer",
            )
        ]
    if isinstance(spec.command, str) and any(op in spec.command for op in ("&&", "||", ";", "|", "\n")):
        return [
            Problem(
                path=("command",), message=f"is a shell line; gkr appends {SPARE_OVERRIDE}N to it: give it as a list"
            )
        ]
    found = shape(spec)
    if found is None:
        return [
            Problem(
                path=where, message="a spare is a replica group's worth of workers: set replica_groups or group_size"
            )
        ]
    beyond = spare_rule.problem(spec.spare_groups, found[0])
    return [] if beyond is None else [Problem(path=where, message=beyond)]
