"""Resolve a job description against the fleet registry: where it runs and with what, checked.

Every problem is collected (one line each) before anything is rendered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fleet import names
from fleet.problems import one_of
from gkr.registry import Machine, Pool, Region, Registry, Team
from gkr.spec import JobSpec, Ray

NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DIGEST = re.compile(r"[^@\s]+@sha256:[0-9a-f]{64}")
# KubeRay's limits: the name is the prefix of the objects and labels it creates.
NAME_LIMITS = {"rayjob": 47, "raycluster": 53, "job": 63}
SYSTEM_SHARE = 0.9  # what a pod may ask of a node; the rest is the node's own (kubelet, daemons)


@dataclass(frozen=True)
class Problem:
    field: str  # the job file key or flag it comes from, e.g. "pods"
    message: str


@dataclass(frozen=True)
class Resolved:
    spec: JobSpec
    registry: Registry
    region: Region
    team: Team
    pool: Pool
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
        return self.spec.pods * self.spec.gpus_per_pod

    @property
    def context(self) -> str:
        return self.registry.context(self.region)

    @property
    def nodes(self) -> int:
        """Nodes the GPU pods take (pods share a node when they use part of its GPUs)."""
        per_node = self.machine.gpus // self.spec.gpus_per_pod if 0 < self.spec.gpus_per_pod <= self.machine.gpus else 1
        return -(-self.spec.pods // per_node)


def default_share(machine: Machine, gpus: int, total: int) -> int:
    """A pod's share of a machine for `gpus` of its GPUs, less what the node keeps for itself."""
    fraction = min(gpus, machine.gpus) / machine.gpus if machine.gpus and gpus else 0.0
    return int(total * fraction * SYSTEM_SHARE)


def team_pools(region: Region, team: Team) -> list[Pool]:
    return [p for p in region.pools if p.team in (None, team.name)]


def resolve(
    spec: JobSpec, registry: Registry, default_region: str | None = None
) -> tuple[Resolved | None, list[Problem]]:
    problems: list[Problem] = []
    limit = NAME_LIMITS[spec.kind]
    if not NAME.fullmatch(spec.name) or len(spec.name) > limit:
        problems.append(
            Problem(
                "name",
                f"{spec.name!r} is not a valid {spec.kind} name: at most {limit} lowercase letters, digits and '-', starting with a letter",
            )
        )
    teams = {t.name: t for t in registry.teams}
    team = teams.get(spec.team)
    if team is None:
        return None, [*problems, Problem("team", f"unknown team {spec.team!r}; {one_of(teams, spec.team)}")]
    regions = {r.name: r for r in registry.regions}
    region_name = spec.region or default_region or next((r for r, gpus in team.quota.items() if gpus > 0), None)
    region = regions.get(region_name or "")
    if region is None:
        return None, [
            *problems,
            Problem("region", f"unknown region {region_name!r}; {one_of(regions, region_name or '')}"),
        ]
    usable = team_pools(region, team)
    if spec.pool is None:
        if not usable:
            return None, [
                *problems,
                Problem("region", f"team {team.name} may use no GPU pool in {region.name}; pick another --region"),
            ]
        pool = usable[0]
    else:
        found = next((p for p in region.pools if p.name == spec.pool), None)
        if found is None:
            return None, [
                *problems,
                Problem(
                    "pool", f"no pool {spec.pool!r} in {region.name}; {one_of([p.name for p in usable], spec.pool)}"
                ),
            ]
        pool = found
        if pool not in usable:
            problems.append(
                Problem(
                    "pool", f"pool {pool.name} is dedicated to team {pool.team}; {one_of([p.name for p in usable])}"
                )
            )
    machine = pool.machine
    cpus = spec.cpus_per_pod or max(1, default_share(machine, spec.gpus_per_pod, machine.vcpus) or 4)
    memory = spec.memory_per_pod_gib or max(1, default_share(machine, spec.gpus_per_pod, machine.memory_gb) or 16)
    priority = spec.priority or team.priority
    image = spec.image or registry.trainer_image
    command = ["bash", "-c", spec.command] if isinstance(spec.command, str) else list(spec.command or [])
    resolved = Resolved(spec, registry, region, team, pool, priority, image, cpus, memory, command)
    return resolved, problems + _check(resolved)


def _check(r: Resolved) -> list[Problem]:
    spec, machine, out = r.spec, r.machine, []
    if spec.gpus_per_pod > machine.gpus:
        out.append(
            Problem(
                "gpus_per_pod", f"{spec.gpus_per_pod} GPUs per pod do not fit a {machine.name} ({machine.gpus} GPUs)"
            )
        )
    elif spec.gpus_per_pod and machine.gpus % spec.gpus_per_pod:
        out.append(
            Problem(
                "gpus_per_pod",
                f"{spec.gpus_per_pod} does not divide the {machine.gpus} GPUs of a {machine.name}; use 1, 2, 4 or 8",
            )
        )
    limit_cpus = int(machine.vcpus * SYSTEM_SHARE)
    if r.cpus > limit_cpus:
        out.append(
            Problem(
                "cpus_per_pod",
                f"{r.cpus} CPUs per pod do not fit a {machine.name} (at most {limit_cpus} of its {machine.vcpus})",
            )
        )
    limit_memory = int(machine.memory_gb * SYSTEM_SHARE)
    if r.memory_gib > limit_memory:
        out.append(
            Problem(
                "memory_per_pod_gib",
                f"{r.memory_gib} GiB per pod does not fit a {machine.name} (at most {limit_memory} GiB)",
            )
        )
    if spec.gpus_per_pod and r.nodes > r.pool.nodes:
        out.append(Problem("pods", f"{spec.pods} pods need {r.nodes} nodes; pool {r.pool.name} has {r.pool.nodes}"))
    quota = r.team.quota.get(r.region.name, 0)
    if r.gpus > quota:
        out.append(
            Problem(
                "pods",
                f"{spec.pods} pods x {spec.gpus_per_pod} GPUs = {r.gpus:,} GPUs, above team {r.team.name}'s quota of {quota:,} in {r.region.name}",
            )
        )
    if r.priority not in r.registry.priorities:
        out.append(Problem("priority", f"unknown priority {r.priority!r}; {one_of(r.registry.priorities, r.priority)}"))
    if not DIGEST.fullmatch(r.image):
        out.append(Problem("image", f"{r.image!r} is not pinned by digest; append @sha256:<64 hex digits>"))
    out += [
        Problem("env", f"{key!r} is not a valid environment variable name")
        for key in spec.env
        if not ENV_NAME.fullmatch(key)
    ]
    if spec.kind in ("rayjob", "job") and not r.command:
        out.append(
            Problem("command", f"a {spec.kind} needs a command; pass it after -- or set command: in the job file")
        )
    if spec.kind == "raycluster" and r.command:
        out.append(Problem("command", "a raycluster runs no command; submit jobs to it, or use --kind rayjob"))
    return out + _ray(spec)


def _ray(spec: JobSpec) -> list[Problem]:
    ray, out = spec.ray, []
    if spec.kind == "rayjob":
        if not ray.shutdown_after_finish:
            ttl = " (KubeRay also ignores ray.ttl_seconds without it)" if ray.ttl_seconds is not None else ""
            out.append(
                Problem(
                    "ray.shutdown_after_finish",
                    f"a Kueue-managed RayJob must shut its cluster down when it finishes{ttl}",
                )
            )
        if ray.backoff_limit is not None and ray.interactive:
            out.append(Problem("ray.backoff_limit", "KubeRay rejects backoff_limit in interactive mode"))
        if ray.cluster is not None:
            out.append(
                Problem(
                    "ray.cluster",
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
        out.append(Problem(f"ray.{changed[0]}", f"applies to RayJobs only, not to a {spec.kind}"))
    return out
