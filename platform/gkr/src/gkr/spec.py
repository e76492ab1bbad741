"""The job description researchers write (YAML, flags, or both): every key declared once, here.

Each key is a field declared with `contract.codec.setting`: its type, default, bounds, flag and
help. `contract.codec.decode` reads a job against these classes; gkr/keys.py derives the flag
table, the submit command's options and the README's key table from them, so a new key is one
field here plus its use in rendering. Precedence: defaults < job file < flags. A key left unset
(None) is resolved against the fleet (resolve.py): region, pool, image, priority, CPU, memory.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from contract import codec, spares
from contract.codec import setting
from contract.problem import Path, Problem
from gkr import keys

AFTER_DASHES = "the command after --"  # the flag column of `command`: it is the command's arguments
Kind = Literal["rayjob", "raycluster", "job"]


@dataclass(frozen=True)
class Topology:
    mode: Literal["required", "preferred"] = setting(
        "preferred", help="`required`: Kueue admits the job only where it fits one domain; `preferred`: where it can"
    )
    level: Literal["block", "subblock", "host"] = setting("block", help="the domain: `block`, `subblock` or `host`")


# KubeRay's RayJob fields are int32 (ray-operator/apis/ray/v1/rayjob_types.go).
INT32_MAX = 2**31 - 1
# Each retry restarts the whole gang (a new Ray cluster); a job that failed this often fails for a reason a
# retry does not fix. (KubeRay compares failures with backoffLimit + 1 in int32: a bound keeps it clear of that.)
MAX_BACKOFF_LIMIT = 10
# RayJob activeDeadlineSeconds: KubeRay fails the RayJob once that long has passed since its StartTime, which it
# sets each time the RayJob leaves New: at admission, after a Kueue preemption and at each retry (KubeRay v1.7.0
# rayjob_controller.go initRayJobStatusIfNeed, checkActiveDeadlineAndUpdateStatusIfNeeded), so queueing never
# counts and the deadline bounds one attempt; a DeadlineExceeded RayJob is not retried
# (checkBackoffLimitAndUpdateStatusIfNeeded). 7 days: more than any fine-tune, evaluation or RL job needs, so it
# only ends a job stuck with its GPUs (every pod Running, nothing committed) that nobody stopped; a pretraining
# run that means to go longer says so (platform/gkr/examples/pretrain-128-nodes.yaml).
DEFAULT_DEADLINE_SECONDS = 7 * 24 * 3600


@dataclass(frozen=True)
class Ray:
    head_cpus: int = setting(8, low=1, help="CPUs of the Ray head (on the region's CPU pool)")
    head_memory_gib: int = setting(32, low=1, help="memory of the Ray head, GiB")
    shutdown_after_finish: bool = setting(True, help="delete the Ray cluster when the job ends (Kueue requires it)")
    ttl_seconds: int | None = setting(
        None,
        low=0,
        help="refused: Kueue frees a RayJob's quota when it finishes while its cluster would keep the nodes "
        "for the TTL (kubernetes-sigs/kueue#3994)",
    )
    backoff_limit: int | None = setting(
        None,
        low=0,
        high=MAX_BACKOFF_LIMIT,
        help="retries of a failed RayJob, each on a new Ray cluster under the same Kueue admission "
        "(default: 2; 0 in interactive mode, where KubeRay allows none)",
    )
    deadline_seconds: int = setting(
        DEFAULT_DEADLINE_SECONDS,
        low=1,
        high=INT32_MAX,
        help="how long one admitted attempt may run before KubeRay fails it, not retried "
        "(7 days; a retry or a re-admission starts the clock again)",
    )
    interactive: bool = setting(False, help="KubeRay's interactive mode: the RayJob waits for a submission")
    cluster: str | None = setting(None, help="an existing RayCluster to run on; not with Kueue (refused)")


@dataclass(frozen=True)
class RegionShare:
    """One region's part of a run across regions (gkr/multiregion.py)."""

    replica_groups: int = setting(low=1, help="the replica groups the run has in that region")


@dataclass(frozen=True)
class TrainerRole:
    """An RL job's trainer (gkr/roles.py): the replica-group shape of a plain job (gkr/groups.py)."""

    pods: int = setting(low=1, help="the trainer's GPU pods (Ray workers of its worker group)")
    gpus_per_pod: int = setting(8, low=0, help="the trainer's GPUs per pod; 0 only with CPU generators")
    replica_groups: int | None = setting(None, low=1, help="replica groups the trainer's GPUs form (or group_size)")
    group_size: int | None = setting(None, low=1, help="GPUs (ranks) in each of the trainer's replica groups")


@dataclass(frozen=True)
class GeneratorRole:
    """An RL job's generators (gkr/roles.py): inference engines that sample with the trainer's weights."""

    pods: int = setting(low=1, help="the generators' pods (Ray workers of their worker group)")
    gpus_per_pod: int = setting(8, low=0, help="the generators' GPUs per pod; 0 only with a CPU trainer")
    tensor_parallel: int = setting(
        1, low=1, help="GPUs per engine: a divisor of gpus_per_pod (1 on CPU); above 1 only with rl.engine=vllm"
    )
    image: str | None = setting(None, help="the generators' image (default: the job's image; see roles in the README)")


@dataclass(frozen=True)
class Roles:
    """An RL job: a trainer and its generators, one RayJob, admitted together, in one pool."""

    trainer: TrainerRole = setting(help="the trainer role")
    generators: GeneratorRole = setting(help="the generator role")


@dataclass(frozen=True)
class JobSpec:
    name: str = setting(
        flag="--name", help="DNS-1035; at most 47 characters for a RayJob, 53 for a RayCluster, 63 for a Job"
    )
    team: str = setting(
        flag="--team", help="its namespace `team-<team>`, Kueue queue and quota (default: the user config's)"
    )
    kind: Kind = setting(
        "rayjob",
        flag="--kind",
        help="`rayjob`, `raycluster` (persistent: stays until `gkr delete`) or `job` (no Ray: an indexed Job)",
    )
    region: str | None = setting(
        None,
        flag="--region",
        help="where it runs (default: the user config's, else the team's region with the largest GPU quota)",
    )
    pool: str | None = setting(
        None, flag="--pool", help="a GPU pool the team may use in the region (default: the first of them)"
    )
    image: str | None = setting(
        None,
        flag="--image",
        help="in the fleet registry, pinned by version or digest (default: the fleet's trainer image)",
    )
    command: str | tuple[str, ...] | None = setting(
        None, flag=AFTER_DASHES, help="a string (run by `bash -c`) or a list; none for a raycluster"
    )
    pods: int = setting(1, low=1, flag="--pods", help="GPU pods (Ray workers, or the Job's pods)")
    gpus_per_pod: int = setting(
        8, low=0, flag="--gpus-per-pod", help="a divisor of the machine's GPUs; 0 for a CPU job (the CPU pool)"
    )
    # How the GPUs form the trainer's replica groups (gkr/groups.py); at most one is needed, the other follows.
    replica_groups: int | None = setting(
        None, low=1, flag="--replica-groups", help="replica groups the GPUs form (or give group_size)"
    )
    group_size: int | None = setting(None, low=1, flag="--group-size", help="GPUs (ranks) in each replica group")
    spare_groups: int | None = setting(
        None,
        low=0,
        flag="--spare-groups",
        help=f"idle replica groups held for replacements, 0-{spares.MAX} and at most the job's replica groups "
        f"(default: 1 from {spares.SPARE_FROM} groups, 1 more per {spares.PER_SPARE:,}; the trainer on Ray only)",
    )
    cpus_per_pod: int | None = setting(
        None, low=1, flag="--cpus-per-pod", help="CPUs per pod (default: 90% of its GPUs' share of the machine)"
    )
    memory_per_pod_gib: int | None = setting(
        None, low=1, flag="--memory-per-pod-gib", help="GiB per pod (default: 90% of its GPUs' share of the machine)"
    )
    priority: str | None = setting(
        None, flag="--priority", help="a priority class of the fleet, at most the team's ceiling (default: the team's)"
    )
    topology: Topology | None = setting(
        None, flag="--topology", help="Kueue topology-aware placement (the flag: MODE[:LEVEL], e.g. required:block)"
    )
    preflight: bool = setting(
        True, flag="--no-preflight", help="the preflight checks before the command (the flag skips them)"
    )
    checkpoint: bool = setting(True, help="the team's folder of the region's checkpoint bucket at /checkpoints")
    datasets: tuple[str, ...] = setting(
        (), flag="--dataset", help="fleet dataset buckets, each read-only at /data/NAME (the flag: repeat it)"
    )
    env: dict[str, str] = setting(
        factory=dict, flag="--env", help="extra environment (the flag: KEY=VALUE, repeat it); not the platform's own"
    )
    ray: Ray = setting(factory=Ray, help="Ray options; those of a RayJob are refused on other kinds")
    # A run across regions (gkr/multiregion.py): one RayJob per region, one Lighthouse in `home`.
    regions: dict[str, RegionShare] = setting(
        factory=dict, flag="--region", help="a run across regions (the flag: REGION=REPLICA_GROUPS, repeat it)"
    )
    home: str | None = setting(
        None, flag="--home", help="a run across regions: where its Lighthouse runs (default: the first region)"
    )
    min_replicas: int | None = setting(
        None, low=1, flag="--min-replicas", help="a run across regions: the Lighthouse's quorum floor (default: 1)"
    )
    roles: Roles | None = setting(
        None, help="an RL job (rayjob only): a trainer and generators in one pool; not with pods or a group shape"
    )
    allow_per_step_sync: bool = setting(
        False, flag="--force-per-step-sync", help="a run across regions: allow an optimizer that syncs every step"
    )


def parse_job(data: dict[str, Any], cls: type[JobSpec] = JobSpec) -> tuple[JobSpec | None, list[Problem]]:
    """The job, or None and every problem found (contract.problem.Problem, paths into the job).

    Around the one decoder, what it cannot know: text no process can receive (before), env numbers
    written bare in YAML (before: they are strings to the process), repeated datasets (after).
    """
    problems = _text_problems(data, ())
    if problems:
        return None, problems[:1]  # one is enough; the rest would repeat it
    flags = keys.flags(cls)

    def fix(path: str, _kind: str) -> str:
        flag = flags.get(path.split(".", maxsplit=1)[0].split("[", maxsplit=1)[0])
        where = "after --" if flag == AFTER_DASHES else f"with {flag}"
        return f"set {path} in the job file" + (f" or {where}" if flag else "")

    spec, problems = codec.decode(cls, _plain(data), fix=fix, null_is_default=True)
    if spec is None:
        return None, problems
    return replace(spec, datasets=tuple(dict.fromkeys(spec.datasets))), []


def _plain(data: dict[str, Any]) -> dict[str, Any]:
    """A null key is an unset one (YAML's `key:`), so a required one is missing; env numbers as the strings they are."""
    out = {key: value for key, value in data.items() if value is not None}
    env = out.get("env")
    if isinstance(env, dict):
        out["env"] = {
            k: str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v for k, v in env.items()
        }
    return out


def _text_problems(value: Any, path: Path) -> list[Problem]:
    """Strings that cannot reach a container: NUL (exec ends a C string there) or invalid Unicode
    (lone surrogates, from undecodable bytes in a flag: no UTF-8 to send to the API server)."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _text_problems(k, path) + _text_problems(v, (*path, str(k)))]
    if isinstance(value, list | tuple):
        return [p for i, v in enumerate(value) for p in _text_problems(v, (*path, i))]
    if isinstance(value, str):
        if "\x00" in value:
            return [Problem(path=path, message="contains a NUL character, which no process can receive; remove it")]
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return [Problem(path=path, message="is not valid Unicode text (bytes that are not UTF-8); retype it")]
    return []
