"""What the cluster would refuse of a resolved job, or what could not work, checked before rendering.

Every problem is collected (one line each, a `contract.problem.Problem` with the job key to blame).
"""

from __future__ import annotations

import re

from contract.problem import Problem, one_of
from contract.registry import Registry
from contract.words import count, possessive, with_article
from gkr import groups
from gkr.render import RESERVED_ENV_PREFIXES, USER_NCCL_ENV, platform_env
from gkr.resolved import SYSTEM_SHARE, Resolved
from gkr.spec import JobSpec, Ray

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# An image reference below the registry: path, then a version tag and/or a digest.
IMAGE_PATH = r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
IMAGE_REF = rf"(?P<path>{IMAGE_PATH})(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}}))?(?:@(?P<digest>[^@]*))?"
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# Linux's MAX_ARG_STRLEN (32 pages): the most one argument or one KEY=VALUE may hold at exec.
# Past it the container fails to start with E2BIG ("argument list too long").
MAX_ARG_BYTES = 128 * 1024


def problems(r: Resolved) -> list[Problem]:
    """Every problem of a resolved job: its shape, its quota, what it names, its command, its Ray options."""
    out = _shape(r)
    out += _cpu_capacity(r)
    quota = r.team.quota.get(r.region.name, 0)
    if r.gpus > quota:
        out.append(
            Problem(
                path=("pods",),
                message=f"{r.gpus_text}, above team {possessive(r.team.name)} quota of {quota:,} in {r.region.name}",
            )
        )
    out += _references(r)
    out += _shadowed_env(r)
    out += _exec_limits(r)
    return out + _command(r) + _ray(r.spec) + _generators(r)


def _generators(r: Resolved) -> list[Problem]:
    """An RL job's generator pods against the pool's machine, and their image (gkr/roles.py).

    The pool's nodes are checked for both roles at once (Resolved.nodes); here, what one generator pod asks.
    """
    generators = r.generators
    if generators is None or generators.spec.roles is not None:
        return []
    own = {"gpus_per_pod": ("roles", "generators", "gpus_per_pod")}
    trainer = _shape(r)  # the same cpus_per_pod too large for both roles is one line
    found = [
        p
        for p in _shape(generators)
        if p.path[0] in ("gpus_per_pod", "cpus_per_pod", "memory_per_pod_gib") and p not in trainer
    ]
    out = [Problem(path=own.get(str(p.path[0]), p.path), message=p.message) for p in found]
    image = r.spec.roles.generators.image if r.spec.roles else None
    if image is not None and (problem := image_problem(image, r.registry)) is not None:
        out.append(Problem(path=("roles", "generators", "image"), message=problem))
    return out


def _shape(r: Resolved) -> list[Problem]:
    """One pod against one machine, and the job against its pool; the replica groups only on a sound pod shape."""
    spec, machine = r.spec, r.machine
    limit_cpus, limit_memory = int(machine.vcpus * SYSTEM_SHARE), int(machine.memory_gb * SYSTEM_SHARE)
    gpus = spec.gpus_per_pod
    # (wrong?, field, what)
    checks: list[tuple[bool, str, str]] = [
        (
            gpus > machine.gpus,
            "gpus_per_pod",
            f"{gpus} GPUs per pod do not fit {with_article(machine.name)} ({machine.gpus} GPUs)",
        ),
        (
            0 < gpus <= machine.gpus and machine.gpus % gpus != 0,
            "gpus_per_pod",
            f"{gpus} does not divide the {machine.gpus} GPUs of {with_article(machine.name)}; use 1, 2, 4 or 8",
        ),
        (
            r.cpus > limit_cpus,
            "cpus_per_pod",
            f"{r.cpus} CPUs per pod do not fit {with_article(machine.name)} (at most {limit_cpus} of its {machine.vcpus})",
        ),
        (
            r.memory_gib > limit_memory,
            "memory_per_pod_gib",
            f"{r.memory_gib} GiB per pod does not fit {with_article(machine.name)} (at most {limit_memory} GiB)",
        ),
        (
            bool(gpus) and r.nodes > r.pool.nodes,
            "pods",
            f"{r.pods_text} need {r.nodes:,} nodes; pool {r.pool.name} has {r.pool.nodes:,}",
        ),
    ]
    out = [Problem(path=(field,), message=what) for wrong, field, what in checks if wrong]
    if not any(wrong for wrong, field, _ in checks if field in ("gpus_per_pod", "pods")):
        out += groups.problems(spec) or groups.spare_problems(spec)  # one cause, one line
    return out


def _references(r: Resolved) -> list[Problem]:
    """What the job names must exist and be allowed: priority (under the team's ceiling), image, datasets, env names."""
    out = []
    if r.priority not in r.registry.priorities:
        out.append(
            Problem(
                path=("priority",),
                message=f"unknown priority {r.priority!r}; {one_of(r.registry.priorities, r.priority)}",
            )
        )
    elif (ceiling := _ceiling_problem(r)) is not None:
        out.append(Problem(path=("priority",), message=ceiling))
    if (image := image_problem(r.image, r.registry)) is not None:
        out.append(Problem(path=("image",), message=image))
    datasets = [d.name for d in r.registry.datasets]
    out += [
        Problem(path=("datasets",), message=f"unknown dataset {name!r}; {one_of(datasets, name)}")
        for name in r.spec.datasets
        if name not in datasets
    ]
    out += [
        Problem(path=("env",), message=f"{key!r} is not a valid environment variable name")
        for key in r.spec.env
        if not ENV_NAME.fullmatch(key)
    ]
    return out


def _command(r: Resolved) -> list[Problem]:
    kind = r.spec.kind
    if kind in ("rayjob", "job") and not r.command:
        return [
            Problem(
                path=("command",), message=f"a {kind} needs a command; pass it after -- or set command: in the job file"
            )
        ]
    if kind == "raycluster" and r.command:
        return [
            Problem(path=("command",), message="a raycluster runs no command; submit jobs to it, or use --kind rayjob")
        ]
    return []


def image_problem(image: str, registry: Registry) -> str | None:
    """Why the cluster would refuse this image, or None.

    Binary Authorization admits only the fleet registry; a reference must name one build
    (a version tag or a digest) so that every pod of a job runs the same code. The fleet's
    own trainer image is pinned in fleet.yaml, which is reviewed: it is trusted as pinned.
    """
    if image == registry.trainer_image:
        return None
    prefix = f"{registry.image_registry}/"
    fix = "pin it by version (:1.2.3) or digest (@sha256:<64 hex digits>)"
    if not image.startswith(prefix):
        return f"{image!r} is not in the fleet registry; push it to {prefix} (the clusters admit no other) and {fix}"
    ref = re.fullmatch(IMAGE_REF, image[len(prefix) :])
    if ref is None:
        return f"{image!r} is not a valid image reference; {fix}"
    if ref["digest"] is not None and not DIGEST.fullmatch(ref["digest"]):
        return f"{image!r} has a malformed digest; {fix}"
    if ref["digest"] is None and ref["tag"] in (None, "latest"):
        return f"{image!r} is not pinned ({'latest moves' if ref['tag'] else 'no tag'}); {fix}"
    return None


def _exec_limits(r: Resolved) -> list[Problem]:
    """Arguments and variables the kernel would refuse to pass to the container's process."""
    out = []
    longest = max((len(a.encode("utf-8", "surrogatepass")) for a in r.command), default=0)
    if longest > MAX_ARG_BYTES:
        out.append(
            Problem(
                path=("command",),
                message=f"one argument of the command is {longest:,} bytes; Linux passes at most {MAX_ARG_BYTES:,} "
                "per argument (MAX_ARG_STRLEN): put the script in a file in the image",
            )
        )
    for key, value in r.spec.env.items():
        size = len(f"{key}={value}".encode("utf-8", "surrogatepass"))
        if size > MAX_ARG_BYTES:
            out.append(
                Problem(
                    path=("env", key),
                    message=f"{key}=... is {size:,} bytes; Linux passes at most {MAX_ARG_BYTES:,} per variable "
                    "(MAX_ARG_STRLEN): put the value in a file in the image or a dataset bucket",
                )
            )
            break  # one is enough to know what to fix
    return out


def _ceiling_problem(r: Resolved) -> str | None:
    """Why the team may not use this priority, or None (the admission policy refuses it as well)."""
    values, ceiling = r.registry.priorities, r.team.ceiling
    if values[r.priority] <= values.get(ceiling, values[r.priority]):
        return None
    allowed = sorted((p for p, v in values.items() if v <= values[ceiling]), key=lambda p: -values[p])
    return (
        f"{r.priority} is above team {possessive(r.team.name)} ceiling {ceiling}; use one of {', '.join(allowed)}, "
        f"or ask the fleet owners to raise the team's max_priority"
    )


def _shadowed_env(r: Resolved) -> list[Problem]:
    """User variables that would replace one the platform sets (its own render is the list)."""
    if not r.spec.env:
        return []
    platform = platform_env(r)
    out = []
    for key in r.spec.env:
        if key in platform:
            out.append(
                Problem(
                    path=("env", key), message=f"{key} is set by the platform on this job's pods; rename your variable"
                )
            )
        elif key.startswith(RESERVED_ENV_PREFIXES) and key not in USER_NCCL_ENV:
            prefix = next(p for p in RESERVED_ENV_PREFIXES if key.startswith(p))
            out.append(
                Problem(path=("env", key), message=f"{prefix}* variables belong to the platform; rename your variable")
            )
    return out


def _cpu_capacity(r: Resolved) -> list[Problem]:
    """The Ray head and CPU-only pods against the region's CPU pool: one machine each, the pool's maximum together."""
    spec, pool = r.spec, r.cpu_pool
    head = spec.kind != "job"
    if pool is None:
        # CPU-only jobs were refused while choosing the pool; a Ray head must not take a GPU node either.
        return (
            [Problem(path=("kind",), message=f"{r.region.name} has no CPU pool for the Ray head; use --kind job")]
            if head
            else []
        )
    machine, out = pool.machine, []
    limit_cpus, limit_memory = int(machine.vcpus * SYSTEM_SHARE), int(machine.memory_gb * SYSTEM_SHARE)
    if head and (spec.ray.head_cpus > limit_cpus or spec.ray.head_memory_gib > limit_memory):
        out.append(
            Problem(
                path=("ray", "head_cpus" if spec.ray.head_cpus > limit_cpus else "head_memory_gib"),
                message=f"a Ray head of {spec.ray.head_cpus} CPUs and {spec.ray.head_memory_gib} GiB does not fit {with_article(machine.name)} "
                f"of CPU pool {pool.name} (at most {limit_cpus} CPUs, {limit_memory} GiB)",
            )
        )
    if spec.gpus_per_pod == 0 and r.cpus <= limit_cpus and r.memory_gib <= limit_memory:
        nodes = r.nodes + (1 if head else 0)
        if nodes > pool.nodes:
            out.append(
                Problem(
                    path=("pods",),
                    message=f"{count(spec.pods, 'pod')} x {r.cpus} CPU = {spec.pods * r.cpus:,} CPU need {nodes:,} {machine.name} nodes; "
                    f"CPU pool {pool.name} in {r.region.name} scales to {pool.nodes:,} ({pool.nodes * limit_cpus:,} CPU for pods)",
                )
            )
    return out


def _ray(spec: JobSpec) -> list[Problem]:
    """What Kueue and KubeRay refuse, or would do wrongly, of the `ray` keys; every gkr RayJob is Kueue's (queue label)."""
    ray, out = spec.ray, []
    if spec.kind == "rayjob":
        if not ray.shutdown_after_finish:
            ttl = " (KubeRay also ignores ray.ttl_seconds without it)" if ray.ttl_seconds is not None else ""
            out.append(
                Problem(
                    path=("ray", "shutdown_after_finish"),
                    message=f"a Kueue-managed RayJob must shut its cluster down when it finishes{ttl}",
                )
            )
        elif ray.ttl_seconds is not None:
            # Kueue finishes the Workload, freeing its quota, as soon as the RayJob is Complete or Failed
            # (v0.19.2 pkg/controller/jobs/rayjob/rayjob_controller.go Finished; jobframework/reconciler.go,
            # "handle job is finished"); KubeRay deletes the cluster only ttlSecondsAfterFinished after its
            # EndTime (v1.7.0 rayjob_controller.go handleShutdownAfterJobFinishes): the nodes stay held,
            # uncounted, while Kueue admits other jobs onto them.
            out.append(
                Problem(
                    path=("ray", "ttl_seconds"),
                    message="Kueue frees a RayJob's quota when it finishes, while its Ray cluster would keep the "
                    "nodes for the TTL (kubernetes-sigs/kueue#3994); drop ray.ttl_seconds",
                )
            )
        if ray.backoff_limit and ray.interactive:
            out.append(
                Problem(
                    path=("ray", "backoff_limit"),
                    message="KubeRay refuses retries in interactive mode; drop ray.backoff_limit or set it to 0",
                )
            )
        if ray.cluster is not None:
            out.append(
                Problem(
                    path=("ray", "cluster"),
                    message="a Kueue-managed RayJob cannot use an existing cluster (clusterSelector); drop ray.cluster",
                )
            )
        return out
    defaults = Ray()
    changed = [
        k
        for k in ("ttl_seconds", "backoff_limit", "deadline_seconds", "cluster", "interactive", "shutdown_after_finish")
        if getattr(ray, k) != getattr(defaults, k)
    ]
    if changed:
        out.append(Problem(path=("ray", changed[0]), message=f"applies to RayJobs only, not to a {spec.kind}"))
    return out
