"""Resolve a job description against the fleet registry: where it runs and with what, checked.

Every problem is collected (one line each) before anything is rendered (the checks: gkr/checks.py).
"""

from __future__ import annotations

from contract import names
from contract.problem import Problem, one_of
from contract.registry import Pool, Region, Registry, Team, team_pools
from contract.words import count, possessive
from gkr import checks, defaults, render, roles
from gkr.resolved import Resolved, pod_size
from gkr.spec import JobSpec

# KubeRay's limits: the name is the prefix of the objects and labels it creates.
NAME_LIMITS = {"rayjob": names.RAYJOB_NAME_MAX, "raycluster": names.RAYCLUSTER_NAME_MAX, "job": names.DNS_LABEL_MAX}


def resolve(
    spec: JobSpec, registry: Registry, default_region: str | None = None
) -> tuple[Resolved | None, list[Problem]]:
    problems = roles.problems(spec)
    if problems:  # the shape below would be the wrong one
        return None, problems
    # An RL job: the trainer's shape is the job's, the generators follow it (gkr/roles.py).
    spec = roles.trainer_view(spec)
    limit = NAME_LIMITS[spec.kind]
    if not names.is_dns1035_label(spec.name, limit):
        problems.append(
            Problem(
                path=("name",),
                message=f"{spec.name!r} is not a valid {spec.kind} name: at most {limit} lowercase letters, digits and '-', starting with a letter",
            )
        )
    teams = {t.name: t for t in registry.teams}
    team = teams.get(spec.team)
    if team is None:
        return None, [
            *problems,
            Problem(path=("team",), message=f"unknown team {spec.team!r}; {one_of(teams, spec.team)}"),
        ]
    regions = {r.name: r for r in registry.regions}
    region_name = spec.region or default_region or defaults.default_region(registry, team)
    region = regions.get(region_name or "")
    if region is None:
        return None, [
            *problems,
            Problem(path=("region",), message=f"unknown region {region_name!r}; {one_of(regions, region_name or '')}"),
        ]
    cpu_pool = region.cpu_pools[0] if region.cpu_pools else None
    found_pool, problem = _pool(spec, region, team, cpu_pool)
    if found_pool is None:
        return None, [*problems, problem] if problem else problems
    pool = found_pool
    if problem:
        problems.append(problem)
    cpus, memory = pod_size(spec, pool.machine)
    priority = spec.priority or team.priority
    image = spec.image or registry.trainer_image
    command = ["bash", "-c", spec.command] if isinstance(spec.command, str) else list(spec.command or [])
    resolved = Resolved(spec, registry, region, team, pool, cpu_pool, priority, image, cpus, memory, command)
    found = problems + checks.problems(resolved)
    return resolved, [roles.blame(p) for p in found] if spec.roles else found


def _pool(spec: JobSpec, region: Region, team: Team, cpu_pool: Pool | None) -> tuple[Pool | None, Problem | None]:
    """The pool the job's pods run on, and a problem that does not stop resolving."""
    cpu_names = [p.name for p in region.cpu_pools]
    if spec.gpus_per_pod == 0:  # CPU-only pods go to the region's CPU pool, never to GPU nodes
        if cpu_pool is None:
            return None, Problem(
                path=("gpus_per_pod",),
                message=f"{region.name} has no CPU pool for CPU-only pods; pick another --region",
            )
        if spec.pool is None:
            return cpu_pool, None
        found = next((p for p in region.cpu_pools if p.name == spec.pool), None)
        if found is None:
            return None, Problem(
                path=("pool",),
                message=f"no CPU pool {spec.pool!r} in {region.name} for a job without GPUs; {one_of(cpu_names, spec.pool)}",
            )
        return found, None
    usable = usable_pools(region, team)
    if spec.pool is None:
        if not usable:
            return None, Problem(
                path=("region",),
                message=f"team {team.name} may use no GPU pool in {region.name}; pick another --region",
            )
        return next(p for p in region.pools if p.name in usable), None
    found = next((p for p in region.pools if p.name == spec.pool), None)
    if found is None:
        if spec.pool in cpu_names:
            return None, Problem(
                path=("pool",),
                message=f"pool {spec.pool} has no GPUs; set gpus_per_pod: 0 for a CPU job, or {_choices(usable, team)}",
            )
        return None, Problem(
            path=("pool",), message=f"no pool {spec.pool!r} in {region.name}; {_choices(usable, team, spec.pool)}"
        )
    if found.name not in usable:
        return found, Problem(
            path=("pool",), message=f"pool {found.name} is dedicated to team {found.team}; {_choices(usable, team)}"
        )
    return found, None


def usable_pools(region: Region, team: Team) -> dict[str, int]:
    """The GPU pools the team may use in the region (the one rule, contract.registry.team_pools), in the region's
    order, each with the team's nominal GPUs there from the registry's quota plan (0: only by borrowing)."""
    nominal = team.pool_quota.get(region.name, {})
    return {p.name: nominal.get(p.name, 0) for p in team_pools(region.pools, team.name)}


def _choices(usable: dict[str, int], team: Team, value: str = "") -> str:
    """`use one of a, b (team t's nominal GPUs: a 768, b 256)`: which pool holds room for the job, before Kueue says."""
    if not usable:
        return one_of(usable, value)
    shares = ", ".join(f"{name} {gpus:,}" for name, gpus in usable.items())
    return f"{one_of(usable, value)} (team {possessive(team.name)} nominal GPUs: {shares})"


def share_warning(r: Resolved) -> str | None:
    """Why a GPU job may wait or be preempted although it fits the team's quota in the region, or None.

    The quota plan splits a team's quota over the pools it may use; each pool is a Kueue flavor, and the
    job's pods select their pool (render._gpu_node), so that flavor is the only one Kueue may give them. A
    job above the team's nominal share of its pool is admitted only by borrowing the other teams' idle GPUs
    there, which they reclaim by preemption (the fleet's ClusterQueues: reclaimWithinCohort Any).
    """
    if not r.spec.gpus_per_pod:
        return None
    nominal = usable_pools(r.region, r.team).get(r.pool.name, 0)
    if r.gpus <= nominal:
        return None
    return (
        f"{r.gpus:,} GPUs are more than team {possessive(r.team.name)} nominal share of pool {r.pool.name} in {r.region.name} "
        f"({nominal:,} GPUs); Kueue may still admit the job by borrowing other teams' idle GPUs there, "
        "and preempts it when they reclaim them: pick a pool with room, or expect to wait"
    )


def roles_warning(r: Resolved) -> str | None:
    """Why an RL job's roles, which asked for one topology domain, may each get a different one, or None.

    Kueue finds a domain per pod set unless two form a pod-set group (render.role_group), which its
    webhook takes only in some shapes (render.role_group_refusal).
    """
    why = render.role_group_refusal(r)
    if why is None or r.spec.topology is None or r.generators is None:
        return None
    level, pods = r.spec.topology.level, (r.worker_pods, r.generators.spec.pods)
    return (
        f"the trainer ({count(pods[0], 'pod')}) and the generators ({count(pods[1], 'pod')}) may each get a "
        f"different {level}, and the weight sync would cross {level}s: {why}"
    )
