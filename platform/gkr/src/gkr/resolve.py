"""Resolve a job description against the fleet registry: where it runs and with what, checked.

Every problem is collected (one line each) before anything is rendered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from contract import names
from contract.problem import Problem, one_of
from contract.registry import Machine, Pool, Region, Registry, Team, team_pools
from gkr import defaults, groups
from gkr.spec import JobSpec, Ray

NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# An image reference below the registry: path, then a version tag and/or a digest.
IMAGE_PATH = r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
IMAGE_REF = rf"(?P<path>{IMAGE_PATH})(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}}))?(?:@(?P<digest>[^@]*))?"
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
DEFAULT_CPU_POD = (4, 16)  # CPUs, GiB of a CPU-only pod that asks for nothing
# KubeRay's limits: the name is the prefix of the objects and labels it creates.
NAME_LIMITS = {"rayjob": 47, "raycluster": 53, "job": 63}
# Linux's MAX_ARG_STRLEN (32 pages): the most one argument or one KEY=VALUE may hold at exec.
# Past it the container fails to start with E2BIG ("argument list too long").
MAX_ARG_BYTES = 128 * 1024
SYSTEM_SHARE = 0.9  # what a pod may ask of a node; the rest is the node's own (kubelet, daemons)


@dataclass(frozen=True)
class Resolved:
    spec: JobSpec
    registry: Registry
    region: Region
    team: Team
    pool: Pool  # the GPU pool, or for a CPU-only job the CPU pool
    cpu_pool: Pool | None  # where the Ray head and CPU-only pods run (None: the region has none)
    priority: str
    image: str
    cpus: int
    memory_gib: int
    command: list[str]

    @property
    def machine(self) -> Machine:
        return self.pool.machine

    @property
    def namespace(self) -> str:
        return names.team_namespace(self.team.name)

    @property
    def queue(self) -> str:
        return names.local_queue(self.team.name)

    @property
    def gpus(self) -> int:
        return self.worker_pods * self.spec.gpus_per_pod

    @property
    def pods_text(self) -> str:
        """ "8 pods", or "8 pods and 1 spare pod": what the job's GPUs are counted over."""
        spare = f" and {self.spare_pods} spare pod{'s' * (self.spare_pods != 1)}" if self.spare_pods else ""
        return f"{self.spec.pods} pods{spare}"

    @property
    def context(self) -> str:
        return self.registry.context(self.region)

    @property
    def spare_pods(self) -> int:
        """Idle worker pods held for replacement groups (gkr/groups.py): admitted, placed and paid with the run."""
        return groups.spare_pods(self.spec) if self.spec.gpus_per_pod else 0

    @property
    def worker_pods(self) -> int:
        return self.spec.pods + self.spare_pods

    @property
    def nodes(self) -> int:
        """Nodes the job's pods take (GPU pods share a node when they use part of its GPUs; CPU pods pack)."""
        if self.spec.gpus_per_pod == 0:
            return cpu_nodes(self.machine, self.spec.pods, self.cpus, self.memory_gib)
        per_node = self.machine.gpus // self.spec.gpus_per_pod if self.spec.gpus_per_pod <= self.machine.gpus else 1
        return -(-self.worker_pods // per_node)


def cpu_nodes(machine: Machine, pods: int, cpus: int, memory_gib: int) -> int:
    """Machines `pods` pods of this shape pack onto (a pod that does not fit one counts one each)."""
    per_node = min(int(machine.vcpus * SYSTEM_SHARE) // cpus, int(machine.memory_gb * SYSTEM_SHARE) // memory_gib)
    return -(-pods // max(1, per_node))


def default_share(machine: Machine, gpus: int, total: int) -> int:
    """A pod's share of a machine for `gpus` of its GPUs, less what the node keeps for itself."""
    fraction = min(gpus, machine.gpus) / machine.gpus if machine.gpus and gpus else 0.0
    return int(total * fraction * SYSTEM_SHARE)


def resolve(
    spec: JobSpec, registry: Registry, default_region: str | None = None
) -> tuple[Resolved | None, list[Problem]]:
    problems: list[Problem] = []
    limit = NAME_LIMITS[spec.kind]
    if not NAME.fullmatch(spec.name) or len(spec.name) > limit:
        problems.append(
            Problem(
                ("name",),
                f"{spec.name!r} is not a valid {spec.kind} name: at most {limit} lowercase letters, digits and '-', starting with a letter",
            )
        )
    teams = {t.name: t for t in registry.teams}
    team = teams.get(spec.team)
    if team is None:
        return None, [*problems, Problem(("team",), f"unknown team {spec.team!r}; {one_of(teams, spec.team)}")]
    regions = {r.name: r for r in registry.regions}
    region_name = spec.region or default_region or defaults.default_region(registry, team)
    region = regions.get(region_name or "")
    if region is None:
        return None, [
            *problems,
            Problem(("region",), f"unknown region {region_name!r}; {one_of(regions, region_name or '')}"),
        ]
    cpu_pool = region.cpu_pools[0] if region.cpu_pools else None
    found_pool, problem = _pool(spec, region, team, cpu_pool)
    if found_pool is None:
        return None, [*problems, problem] if problem else problems
    pool = found_pool
    if problem:
        problems.append(problem)
    machine = pool.machine
    cpus = spec.cpus_per_pod or max(1, default_share(machine, spec.gpus_per_pod, machine.vcpus) or DEFAULT_CPU_POD[0])
    memory = spec.memory_per_pod_gib or max(
        1, default_share(machine, spec.gpus_per_pod, machine.memory_gb) or DEFAULT_CPU_POD[1]
    )
    priority = spec.priority or team.priority
    image = spec.image or registry.trainer_image
    command = ["bash", "-c", spec.command] if isinstance(spec.command, str) else list(spec.command or [])
    resolved = Resolved(spec, registry, region, team, pool, cpu_pool, priority, image, cpus, memory, command)
    return resolved, problems + _check(resolved)


def _pool(spec: JobSpec, region: Region, team: Team, cpu_pool: Pool | None) -> tuple[Pool | None, Problem | None]:
    """The pool the job's pods run on, and a problem that does not stop resolving."""
    cpu_names = [p.name for p in region.cpu_pools]
    if spec.gpus_per_pod == 0:  # CPU-only pods go to the region's CPU pool, never to GPU nodes
        if cpu_pool is None:
            return None, Problem(
                ("gpus_per_pod",), f"{region.name} has no CPU pool for CPU-only pods; pick another --region"
            )
        if spec.pool is None:
            return cpu_pool, None
        found = next((p for p in region.cpu_pools if p.name == spec.pool), None)
        if found is None:
            return None, Problem(
                ("pool",),
                f"no CPU pool {spec.pool!r} in {region.name} for a job without GPUs; {one_of(cpu_names, spec.pool)}",
            )
        return found, None
    usable = team_pools(region.pools, team.name)
    if spec.pool is None:
        if not usable:
            return None, Problem(
                ("region",), f"team {team.name} may use no GPU pool in {region.name}; pick another --region"
            )
        return usable[0], None
    found = next((p for p in region.pools if p.name == spec.pool), None)
    if found is None:
        if spec.pool in cpu_names:
            return None, Problem(
                ("pool",),
                f"pool {spec.pool} has no GPUs; set gpus_per_pod: 0 for a CPU job, or {one_of([p.name for p in usable])}",
            )
        return None, Problem(
            ("pool",), f"no pool {spec.pool!r} in {region.name}; {one_of([p.name for p in usable], spec.pool)}"
        )
    if found not in usable:
        return found, Problem(
            ("pool",), f"pool {found.name} is dedicated to team {found.team}; {one_of([p.name for p in usable])}"
        )
    return found, None


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


def _check(r: Resolved) -> list[Problem]:
    spec, machine = r.spec, r.machine
    limit_cpus, limit_memory = int(machine.vcpus * SYSTEM_SHARE), int(machine.memory_gb * SYSTEM_SHARE)
    gpus = spec.gpus_per_pod
    # (wrong?, field, what): the shape of one pod against one machine, and of the job against its pool.
    checks: list[tuple[bool, str, str]] = [
        (gpus > machine.gpus, "gpus_per_pod", f"{gpus} GPUs per pod do not fit a {machine.name} ({machine.gpus} GPUs)"),
        (
            0 < gpus <= machine.gpus and machine.gpus % gpus != 0,
            "gpus_per_pod",
            f"{gpus} does not divide the {machine.gpus} GPUs of a {machine.name}; use 1, 2, 4 or 8",
        ),
        (
            r.cpus > limit_cpus,
            "cpus_per_pod",
            f"{r.cpus} CPUs per pod do not fit a {machine.name} (at most {limit_cpus} of its {machine.vcpus})",
        ),
        (
            r.memory_gib > limit_memory,
            "memory_per_pod_gib",
            f"{r.memory_gib} GiB per pod does not fit a {machine.name} (at most {limit_memory} GiB)",
        ),
        (
            bool(gpus) and r.nodes > r.pool.nodes,
            "pods",
            f"{r.pods_text} need {r.nodes} nodes; pool {r.pool.name} has {r.pool.nodes}",
        ),
    ]
    out = [Problem((field,), what) for wrong, field, what in checks if wrong]
    if not any(wrong for wrong, field, _ in checks if field in ("gpus_per_pod", "pods")):
        out += groups.problems(spec) or groups.spare_problems(spec)  # on a sound pod shape: one cause, one line
    out += _cpu_capacity(r)
    quota = r.team.quota.get(r.region.name, 0)
    if r.gpus > quota:
        out.append(
            Problem(
                ("pods",),
                f"{r.pods_text} x {spec.gpus_per_pod} GPUs = {r.gpus:,} GPUs, above team {r.team.name}'s quota of {quota:,} in {r.region.name}",
            )
        )
    if r.priority not in r.registry.priorities:
        out.append(
            Problem(("priority",), f"unknown priority {r.priority!r}; {one_of(r.registry.priorities, r.priority)}")
        )
    elif (ceiling := _ceiling_problem(r)) is not None:
        out.append(Problem(("priority",), ceiling))
    if (image := image_problem(r.image, r.registry)) is not None:
        out.append(Problem(("image",), image))
    datasets = [d.name for d in r.registry.datasets]
    out += [
        Problem(("datasets",), f"unknown dataset {name!r}; {one_of(datasets, name)}")
        for name in spec.datasets
        if name not in datasets
    ]
    out += [
        Problem(("env",), f"{key!r} is not a valid environment variable name")
        for key in spec.env
        if not ENV_NAME.fullmatch(key)
    ]
    out += _shadowed_env(r)
    out += _exec_limits(r)
    if spec.kind in ("rayjob", "job") and not r.command:
        out.append(
            Problem(("command",), f"a {spec.kind} needs a command; pass it after -- or set command: in the job file")
        )
    if spec.kind == "raycluster" and r.command:
        out.append(Problem(("command",), "a raycluster runs no command; submit jobs to it, or use --kind rayjob"))
    return out + _ray(spec)


def _exec_limits(r: Resolved) -> list[Problem]:
    """Arguments and variables the kernel would refuse to pass to the container's process."""
    out = []
    longest = max((len(a.encode("utf-8", "surrogatepass")) for a in r.command), default=0)
    if longest > MAX_ARG_BYTES:
        out.append(
            Problem(
                ("command",),
                f"one argument of the command is {longest:,} bytes; Linux passes at most {MAX_ARG_BYTES:,} "
                "per argument (MAX_ARG_STRLEN): put the script in a file in the image",
            )
        )
    for key, value in r.spec.env.items():
        size = len(f"{key}={value}".encode("utf-8", "surrogatepass"))
        if size > MAX_ARG_BYTES:
            out.append(
                Problem(
                    ("env", key),
                    f"{key}=... is {size:,} bytes; Linux passes at most {MAX_ARG_BYTES:,} per variable "
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
        f"{r.priority} is above team {r.team.name}'s ceiling {ceiling}; use one of {', '.join(allowed)}, "
        f"or ask the fleet owners to raise the team's max_priority"
    )


def _shadowed_env(r: Resolved) -> list[Problem]:
    """User variables that would replace one the platform sets (its own render is the list)."""
    if not r.spec.env:
        return []
    from gkr.render import RESERVED_ENV_PREFIXES, platform_env  # render imports this module

    platform = platform_env(r)
    out = []
    for key in r.spec.env:
        if key in platform:
            out.append(Problem(("env", key), f"{key} is set by the platform on this job's pods; rename your variable"))
        elif key.startswith(RESERVED_ENV_PREFIXES):
            prefix = next(p for p in RESERVED_ENV_PREFIXES if key.startswith(p))
            out.append(Problem(("env", key), f"{prefix}* variables belong to the platform; rename your variable"))
    return out


def _cpu_capacity(r: Resolved) -> list[Problem]:
    """The Ray head and CPU-only pods against the region's CPU pool: one machine each, the pool's maximum together."""
    spec, pool = r.spec, r.cpu_pool
    head = spec.kind != "job"
    if pool is None:
        # CPU-only jobs were refused while choosing the pool; a Ray head must not take a GPU node either.
        return [Problem(("kind",), f"{r.region.name} has no CPU pool for the Ray head; use --kind job")] if head else []
    machine, out = pool.machine, []
    limit_cpus, limit_memory = int(machine.vcpus * SYSTEM_SHARE), int(machine.memory_gb * SYSTEM_SHARE)
    if head and (spec.ray.head_cpus > limit_cpus or spec.ray.head_memory_gib > limit_memory):
        out.append(
            Problem(
                ("ray", "head_cpus" if spec.ray.head_cpus > limit_cpus else "head_memory_gib"),
                f"a Ray head of {spec.ray.head_cpus} CPUs and {spec.ray.head_memory_gib} GiB does not fit a {machine.name} "
                f"of CPU pool {pool.name} (at most {limit_cpus} CPUs, {limit_memory} GiB)",
            )
        )
    if spec.gpus_per_pod == 0 and r.cpus <= limit_cpus and r.memory_gib <= limit_memory:
        nodes = r.nodes + (1 if head else 0)
        if nodes > pool.nodes:
            out.append(
                Problem(
                    ("pods",),
                    f"{spec.pods:,} pods x {r.cpus} CPU = {spec.pods * r.cpus:,} CPU need {nodes:,} {machine.name} nodes; "
                    f"CPU pool {pool.name} in {r.region.name} scales to {pool.nodes:,} ({pool.nodes * limit_cpus:,} CPU for pods)",
                )
            )
    return out


def _ray(spec: JobSpec) -> list[Problem]:
    ray, out = spec.ray, []
    if spec.kind == "rayjob":
        if not ray.shutdown_after_finish:
            ttl = " (KubeRay also ignores ray.ttl_seconds without it)" if ray.ttl_seconds is not None else ""
            out.append(
                Problem(
                    ("ray", "shutdown_after_finish"),
                    f"a Kueue-managed RayJob must shut its cluster down when it finishes{ttl}",
                )
            )
        if ray.backoff_limit is not None and ray.interactive:
            out.append(Problem(("ray", "backoff_limit"), "KubeRay rejects backoff_limit in interactive mode"))
        if ray.cluster is not None:
            out.append(
                Problem(
                    ("ray", "cluster"),
                    "a Kueue-managed RayJob cannot use an existing cluster (clusterSelector); drop ray.cluster",
                )
            )
        return out
    defaults = Ray()
    changed = [
        k
        for k in ("ttl_seconds", "backoff_limit", "cluster", "interactive", "shutdown_after_finish")
        if getattr(ray, k) != getattr(defaults, k)
    ]
    if changed:
        out.append(Problem(("ray", changed[0]), f"applies to RayJobs only, not to a {spec.kind}"))
    return out
