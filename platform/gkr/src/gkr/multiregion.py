"""One training run across regions: a job with `regions:` becomes one RayJob per region and one Lighthouse.

Each region's RayJob is the job resolved as if submitted there alone (its cluster, pool, Kueue
queue and the team's quota in that region; `pods` follow from the region's `replica_groups` x
`group_size`), then joined to the run (gkr/lighthouse.py). The checks that concern the run as a
whole are here: the regions exist and are distinct, the home is one of them, the team has quota
in each, and the optimizer synchronizes rarely: a DDP step across regions waits on a WAN round
trip every step, so it is refused unless `allow_per_step_sync` forces it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from contract import names
from contract.problem import Invalid, Problem, one_of
from contract.registry import Registry
from gkr import lighthouse, run_tls
from gkr.inputs import Origins
from gkr.overrides import hydra_value
from gkr.registry import Located
from gkr.render import render
from gkr.resolve import resolve
from gkr.resolved import Resolved
from gkr.spec import JobSpec, RegionShare
from gkr.submit import check_rendered, one_line

# The trainer's optimizers (platform/trainer/configs/optim) that sync every `sync_every` steps;
# its configs/config.yaml defaults to ddp, which all-reduces every step.
RARE_SYNC = ("diloco", "streaming_diloco")
DEFAULT_OPTIMIZER = "ddp"
OPTIMIZER_KEYS = ("optim", "optim.algorithm")
RUN_NAME_KEY = "run.name"
DEFAULT_MIN_REPLICAS = 1  # torchft's: the run goes on while any one replica group is alive


@dataclass(frozen=True)
class Part:
    """One region's share of the run: the job resolved there, its RayJob joined to the run, its members' TLS Secret."""

    resolved: Resolved
    rayjob: dict[str, Any]
    secret: dict[str, Any]  # PLACEHOLDER data until the run is applied (Run.with_identity)

    @property
    def region(self) -> str:
        return self.resolved.region.name


@dataclass(frozen=True)
class Run:
    name: str
    home: Part
    parts: tuple[Part, ...]  # in the order the job names its regions
    lighthouse: tuple[dict[str, Any], ...]  # its TLS Secret, Deployment, Service: in the home cluster
    optimizer: str

    def with_host(self, host: str) -> Run:
        """The run with the Lighthouse's address in every RayJob."""
        parts = tuple(replace(p, rayjob=lighthouse.with_host(p.rayjob, host)) for p in self.parts)
        home = next(p for p in parts if p.region == self.home.region)
        return replace(self, parts=parts, home=home)

    def with_identity(self, identity: run_tls.Identity) -> Run:
        """The run with its minted certificates in its Secrets (only when applying: a dry run shows none)."""
        parts = tuple(replace(p, secret=run_tls.filled(p.secret, identity, "member")) for p in self.parts)
        home = next(p for p in parts if p.region == self.home.region)
        objects = tuple(
            run_tls.filled(o, identity, "lighthouse") if o["kind"] == "Secret" else o for o in self.lighthouse
        )
        return replace(self, parts=parts, home=home, lighthouse=objects)


def optimizer(spec: JobSpec) -> str:
    return hydra_value(spec.command, OPTIMIZER_KEYS) or DEFAULT_OPTIMIZER


def _run_problems(spec: JobSpec, registry: Registry) -> list[Problem]:
    """What is wrong with the run as a whole, before any region is resolved."""
    return _region_problems(spec, registry) + [
        Problem(path=(key,), message=message) for key, message in _setting_problems(spec)
    ]


def _region_problems(spec: JobSpec, registry: Registry) -> list[Problem]:
    """The regions named: known, at least two, `home` among them, each with the team's quota."""
    known = {r.name: r for r in registry.regions}
    out = [
        Problem(path=("regions", name), message=f"unknown region {name!r}; {one_of(known, name)}")
        for name in spec.regions  # a mapping: each region once (the flag and the YAML reader refuse repeats)
        if name not in known
    ]
    if len(spec.regions) < 2:
        message = "a run across regions names at least two; for one, use region: and pods:"
        out.append(Problem(path=("regions",), message=message))
    if spec.home is not None and spec.home not in spec.regions:
        message = f"{spec.home!r} is not one of the run's regions; {one_of(spec.regions, spec.home)}"
        out.append(Problem(path=("home",), message=message))
    team = next((t for t in registry.teams if t.name == spec.team), None)
    if team is not None:
        out += [
            Problem(path=("regions", name), message=f"team {team.name} has no GPU quota in {name}; pick another region")
            for name in spec.regions
            if name in known and team.quota.get(name, 0) == 0
        ]
    return out


def _setting_problems(spec: JobSpec) -> list[tuple[str, str]]:
    """(key, message) for each job setting a run across regions cannot take."""
    out = [
        (key, "comes from each region's replica_groups in a run across regions; drop it")
        for key, given in (
            ("region", spec.region is not None),
            ("pods", spec.pods != 1),
            ("replica_groups", spec.replica_groups is not None),
        )
        if given
    ]
    if spec.roles is not None:
        out.append(("roles", "an RL job runs in one region (across regions is not built yet); drop regions"))
    if spec.kind != "rayjob":
        out.append(("kind", f"a run across regions is made of RayJobs, not a {spec.kind}"))
    if not spec.checkpoint:
        out.append(("checkpoint", "a run across regions resumes from its regions' checkpoints; drop checkpoint"))
    if spec.gpus_per_pod == 0:
        out.append(("gpus_per_pod", "replica groups are made of GPUs; a run across regions needs them"))
    algorithm = optimizer(spec)
    if algorithm not in RARE_SYNC and not spec.allow_per_step_sync:
        out.append(
            (
                "command",
                f"optimizer {algorithm} synchronizes every step, across regions a WAN round trip each time; "
                "add optim=diloco or optim=streaming_diloco to the command, or set allow_per_step_sync: true "
                "(--force-per-step-sync)",
            )
        )
    if hydra_value(spec.command, (RUN_NAME_KEY,)) is None:
        out.append(("command", "set run.name=<name> in the command: every region's checkpoint folder is named by it"))
    return out


def region_spec(spec: JobSpec, name: str, share: RegionShare) -> tuple[JobSpec | None, Problem | None]:
    """The job as one region runs it: pods from the region's replica groups of `group_size` GPUs."""
    size = spec.group_size or spec.gpus_per_pod
    gpus = share.replica_groups * size
    if spec.gpus_per_pod % size and size % spec.gpus_per_pod:
        return None, Problem(
            path=("group_size",),
            message=f"group_size {size:,} would take part of two pods of {spec.gpus_per_pod} GPUs; a group fits in one pod "
            f"or is whole pods: use a divisor or a multiple of {spec.gpus_per_pod}",
        )
    if gpus % spec.gpus_per_pod:
        step = spec.gpus_per_pod // math.gcd(size, spec.gpus_per_pod)
        return None, Problem(
            path=("regions", name, "replica_groups"),
            message=f"in {name}: {share.replica_groups:,} replica groups x {size:,} GPUs = {gpus:,} GPUs do not fill whole pods "
            f"of {spec.gpus_per_pod} GPUs; use a multiple of {step}",
        )
    local = replace(
        spec,
        region=name,
        pods=gpus // spec.gpus_per_pod,
        replica_groups=None,
        group_size=size,
        regions={},
        home=None,
    )
    return local, None


def _in_region(problem: Problem, region: str) -> Problem:
    """A region's problem about the pods it gets, named by what the user wrote: its replica_groups."""
    if problem.path[:1] == ("pods",):
        return Problem(path=("regions", region, "replica_groups"), message=f"in {region}: {problem.message}")
    return problem


def plan(spec: JobSpec, registry: Registry) -> tuple[list[tuple[Resolved, dict[str, Any]]], list[Problem]]:
    """Every region resolved and rendered (its RayJob not yet joined to the run), or the problems."""
    problems = _run_problems(spec, registry)
    if any(p.path[:1] == ("regions",) for p in problems):
        return [], problems  # the regions themselves are wrong: resolving them would only repeat it
    rendered, lines = [], set()
    for name, share in spec.regions.items():
        local, problem = region_spec(spec, name, share)
        if local is None:
            if problem is not None and problem.line() not in lines:  # a group_size that fits no region: once
                lines.add(problem.line())
                problems.append(problem)
            continue
        resolved, found = resolve(local, registry)
        for p in (_in_region(p, name) for p in found):
            if p.line() not in lines:  # the same image or env problem in every region: once
                lines.add(p.line())
                problems.append(p)
        if resolved is not None and not found:
            (rayjob,) = render(resolved)
            rendered.append((resolved, rayjob))
    return rendered, problems


def checkpoint_dir(resolved: Resolved, run_name: str) -> str:
    """A region's checkpoint folder for the run, as a URL another region can read (its own bucket, the team's folder)."""
    return f"gs://{resolved.region.checkpoint_bucket}/{names.team_prefix(resolved.team.name)}{run_name}"


def build(spec: JobSpec, registry: Registry, host: str = lighthouse.PLACEHOLDER_HOST) -> Run:
    """The run's objects; Invalid (problems as contract.problem.Problem lines) when any check fails."""
    rendered, problems = plan(spec, registry)
    if problems:
        raise _Problems(problems)
    regions = list(spec.regions)
    home_name = spec.home or regions[0]
    run_name = hydra_value(spec.command, (RUN_NAME_KEY,)) or spec.name
    dirs = {r.region.name: checkpoint_dir(r, run_name) for r, _ in rendered}
    parts = tuple(
        Part(
            r,
            lighthouse.join(
                rayjob,
                spec.name,
                r.region.name,
                regions,
                home_name,
                host,
                [d for k, d in dirs.items() if k != r.region.name],
            ),
            run_tls.secret(
                spec.name,
                "member",
                r.namespace,
                {names.TEAM_LABEL: r.team.name, names.RUN_LABEL: spec.name, names.REGION_LABEL: r.region.name},
            ),
        )
        for r, rayjob in rendered
    )
    home = next(p for p in parts if p.region == home_name)
    missing = [p.region for p in parts if not p.resolved.region.pod_range]
    if missing:
        raise Invalid(
            [
                f"the registry has no pod range for {', '.join(missing)}; regenerate it (`make generate` or `gkr registry fetch`)"
            ]
        )
    if home.resolved.cpu_pool is None:
        raise _Problems(
            [Problem(path=("home",), message=f"{home_name} has no CPU pool for the Lighthouse; pick another home")]
        )
    reserved = {names.LIGHTHOUSE_ENV, names.RUN_TLS_ENV} & spec.env.keys()
    if reserved:
        raise _Problems(
            [Problem(path=("env", k), message=f"{k} is set by gkr for a run across regions; drop it") for k in reserved]
        )
    objects = lighthouse.objects(
        home.resolved,
        spec.name,
        spec.min_replicas or DEFAULT_MIN_REPLICAS,
        [p.resolved.region.pod_range for p in parts],
    )
    return Run(spec.name, home, parts, tuple(objects), optimizer(spec))


class _Problems(Exception):
    def __init__(self, problems: list[Problem]) -> None:
        super().__init__(problems)
        self.problems = problems


def prepare(spec: JobSpec, origins: Origins, found: Located) -> Run:
    """The run, checked like a single job (sizes, pinned schemas for every cluster); Invalid with every problem."""
    try:
        run = build(spec, found.registry)
    except _Problems as exc:
        raise Invalid(one_line([origins.line(p) for p in exc.problems])) from None
    for part in run.parts:
        check_rendered(part.resolved, [part.rayjob], found, origins)
    check_rendered(run.home.resolved, list(run.lighthouse), found, origins)
    return run
