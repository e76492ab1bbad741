"""The job description researchers write (YAML, flags, or both), as typed data.

Precedence: defaults < job file < flags. Anything left unset is resolved
against the fleet (resolve.py): region, pool, image, priority, per-pod CPU and
memory. Parsed by hand rather than with pydantic: gkr must start fast.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from contract.problem import Path, Problem, one_of

KINDS = ("rayjob", "raycluster", "job")
TOPOLOGY_MODES = ("required", "preferred")
TOPOLOGY_LEVELS = ("block", "subblock", "host")


@dataclass(frozen=True)
class Topology:
    mode: str = "preferred"
    level: str = "block"


@dataclass(frozen=True)
class Ray:
    head_cpus: int = 8
    head_memory_gib: int = 32
    shutdown_after_finish: bool = True  # Kueue requires it for RayJobs
    ttl_seconds: int | None = None  # needs shutdown_after_finish
    backoff_limit: int | None = None  # not with interactive mode
    interactive: bool = False
    cluster: str | None = None  # run on an existing RayCluster (not with Kueue)


@dataclass(frozen=True)
class RegionShare:
    """One region's part of a run across regions (gkr/multiregion.py): its replica groups."""

    name: str
    replica_groups: int


@dataclass(frozen=True)
class JobSpec:
    name: str
    team: str
    kind: str = "rayjob"
    region: str | None = None
    pool: str | None = None
    image: str | None = None
    command: str | list[str] | None = None
    pods: int = 1
    gpus_per_pod: int = 8
    # How the GPUs form the trainer's replica groups (gkr/groups.py); at most one is needed, the other follows.
    replica_groups: int | None = None
    group_size: int | None = None  # ranks (GPUs) per group
    # Idle replica groups' worth of Ray workers the run holds (gkr/groups.py, contract.spares); None: the default.
    spare_groups: int | None = None
    cpus_per_pod: int | None = None
    memory_per_pod_gib: int | None = None
    priority: str | None = None
    topology: Topology | None = None
    preflight: bool = True
    checkpoint: bool = True  # mount the region's checkpoint bucket at /checkpoints
    datasets: tuple[str, ...] = ()  # the fleet's dataset buckets, each read-only at /data/<name>
    env: dict[str, str] = field(default_factory=dict)
    ray: Ray = field(default_factory=Ray)
    # A run across regions (gkr/multiregion.py): one RayJob per region, one Lighthouse in `home`.
    regions: tuple[RegionShare, ...] = ()
    home: str | None = None  # where the Lighthouse runs; default the first of `regions`
    min_replicas: int | None = None  # the Lighthouse's quorum floor (torchft --min_replicas); default 1
    allow_per_step_sync: bool = False  # DDP across regions (a WAN round trip every step) only when forced


class _Reader:
    """Checks one mapping's values against the expected kinds, collecting problems."""

    def __init__(self, data: dict[str, Any], prefix: Path, allowed: tuple[str, ...], problems: list[Problem]) -> None:
        self.data, self.prefix, self.problems = data, prefix, problems
        for key in data:
            if key not in allowed:
                problems.append(Problem(self.path(str(key)), f"unknown key; {one_of(allowed, str(key))}"))

    def path(self, key: str) -> Path:
        return (*self.prefix, key)

    def bad(self, key: str, message: str) -> None:
        self.problems.append(Problem(self.path(key), f"{message} (got {self.data[key]!r})"))

    def text(self, key: str, required: bool = False) -> str | None:
        if key not in self.data or self.data[key] is None:
            if required:
                self.problems.append(
                    Problem(self.path(key), "is required; add it to the job file or pass it as a flag")
                )
            return None
        value = self.data[key]
        if not isinstance(value, str):
            self.bad(key, "must be a string")
            return None
        return value

    def number(self, key: str, minimum: int, default: int | None) -> int | None:
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self.bad(key, "must be a whole number")
            return default
        if value < minimum:
            self.bad(key, f"must be at least {minimum}")
            return default
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            self.bad(key, "must be true or false")
            return default
        return value

    def choice(self, key: str, options: tuple[str, ...], default: str) -> str:
        value = self.data.get(key, default)
        if value not in options:
            self.bad(key, f"must be one of {', '.join(options)}")
            return default
        return str(value)

    def mapping(self, key: str) -> dict[str, Any] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            self.bad(key, "must be a mapping")
            return None
        return value


def _names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def _text_problems(value: Any, path: Path) -> list[Problem]:
    """Strings that cannot reach a container: NUL (exec ends a C string there) or invalid Unicode
    (lone surrogates, from undecodable bytes in a flag: no UTF-8 to send to the API server)."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _text_problems(k, path) + _text_problems(v, (*path, str(k)))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _text_problems(v, (*path, i))]
    if isinstance(value, str):
        if "\x00" in value:
            return [Problem(path, "contains a NUL character, which no process can receive; remove it")]
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return [Problem(path, "is not valid Unicode text (bytes that are not UTF-8); retype it")]
    return []


def parse_job(data: dict[str, Any]) -> tuple[JobSpec | None, list[Problem]]:
    """The job, or None and every problem found (contract.problem.Problem, paths into the job)."""
    problems = _text_problems(data, ())
    if problems:
        return None, problems[:1]  # one is enough; the rest would repeat it
    r = _Reader(data, (), _names(JobSpec), problems)
    command = data.get("command")
    if command is not None and not (
        isinstance(command, str) or (isinstance(command, list) and all(isinstance(c, str) for c in command))
    ):
        r.bad("command", "must be a string or a list of strings")
        command = None
    datasets = data.get("datasets") or []
    if not (isinstance(datasets, list) and all(isinstance(d, str) for d in datasets)):
        r.bad("datasets", "must be a list of dataset names")
        datasets = []
    env = r.mapping("env") or {}
    for key, value in env.items():
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            problems.append(Problem(("env", str(key)), f"must be a string (got {value!r})"))
    topology_data = r.mapping("topology")
    topology = None
    if topology_data is not None:
        t = _Reader(topology_data, ("topology",), _names(Topology), problems)
        topology = Topology(t.choice("mode", TOPOLOGY_MODES, "preferred"), t.choice("level", TOPOLOGY_LEVELS, "block"))
    regions = _regions(r.mapping("regions") or {}, problems)
    ray_data = r.mapping("ray") or {}
    y = _Reader(ray_data, ("ray",), _names(Ray), problems)
    ray = Ray(
        head_cpus=y.number("head_cpus", 1, 8) or 8,
        head_memory_gib=y.number("head_memory_gib", 1, 32) or 32,
        shutdown_after_finish=y.flag("shutdown_after_finish", True),
        ttl_seconds=y.number("ttl_seconds", 0, None),
        backoff_limit=y.number("backoff_limit", 0, None),
        interactive=y.flag("interactive", False),
        cluster=y.text("cluster"),
    )
    spec = JobSpec(
        name=r.text("name", required=True) or "",
        team=r.text("team", required=True) or "",
        kind=r.choice("kind", KINDS, "rayjob"),
        region=r.text("region"),
        pool=r.text("pool"),
        image=r.text("image"),
        command=command,
        pods=r.number("pods", 1, 1) or 1,
        gpus_per_pod=r.number("gpus_per_pod", 0, 8) or 0,
        replica_groups=r.number("replica_groups", 1, None),
        group_size=r.number("group_size", 1, None),
        spare_groups=r.number("spare_groups", 0, None),
        cpus_per_pod=r.number("cpus_per_pod", 1, None),
        memory_per_pod_gib=r.number("memory_per_pod_gib", 1, None),
        priority=r.text("priority"),
        topology=topology,
        preflight=r.flag("preflight", True),
        checkpoint=r.flag("checkpoint", True),
        datasets=tuple(dict.fromkeys(datasets)),
        env={str(k): str(v) for k, v in env.items()},
        ray=ray,
        regions=regions,
        home=r.text("home"),
        min_replicas=r.number("min_replicas", 1, None),
        allow_per_step_sync=r.flag("allow_per_step_sync", False),
    )
    return (None if problems else spec), problems


def _regions(data: dict[str, Any], problems: list[Problem]) -> tuple[RegionShare, ...]:
    """`regions: {us-central1: {replica_groups: 4}, ...}`, in the order written (the first is the default home)."""
    shares = []
    for name, value in data.items():
        path: Path = ("regions", str(name))
        if not isinstance(value, dict):
            problems.append(Problem(path, f"must be a mapping like {{replica_groups: 2}} (got {value!r})"))
            continue
        r = _Reader(value, path, _names(RegionShare)[1:], problems)
        count = r.number("replica_groups", 1, None)
        if count is None and "replica_groups" not in value:
            problems.append(Problem((*path, "replica_groups"), "is required: how many replica groups run there"))
        shares.append(RegionShare(str(name), count or 1))
    return tuple(shares)
