"""An RL job (issue 30): a trainer and its generators, one RayJob with a worker group per role.

One RayJob, not a trainer RayJob beside an inference Deployment: Kueue admits a RayJob as one
Workload with a PodSet per group (head, trainer, generators), all or nothing, so no trainer holds
GPUs while its generators queue, and one quota counts both. Both roles take the job's one pool,
so one zone and one RDMA network for the weight sync; the Ray head stays on the CPU pool.

The trainer is the job as gkr already knows it: `trainer_view` puts its shape where a plain job
has it (pods, gpus_per_pod, the group shape), so the checks, the replica-group rules, spares and
the trainer's environment apply to it unchanged. The generators are a second group resolved on
the same pool (`generator_view`). Pure: the checks that need the machine are in gkr/checks.py.
"""

from __future__ import annotations

from dataclasses import replace

from contract import names
from contract.problem import Problem
from gkr.overrides import hydra_value
from gkr.spec import JobSpec

TRAINER, GENERATORS = "trainer", "generators"
VLLM_OVERRIDE = f"{names.ENGINE_OVERRIDE}={names.VLLM_ENGINE}"  # what the command must pass for tensor parallel
# The trainer's keys, where the checks of a plain job blame them: named as the user wrote them.
TRAINER_KEYS = ("pods", "gpus_per_pod", "replica_groups", "group_size")


def trainer_view(spec: JobSpec) -> JobSpec:
    """The job with the trainer's shape as its own (unchanged without roles)."""
    if spec.roles is None:
        return spec
    t = spec.roles.trainer
    return replace(
        spec, pods=t.pods, gpus_per_pod=t.gpus_per_pod, replica_groups=t.replica_groups, group_size=t.group_size
    )


def generator_view(spec: JobSpec) -> JobSpec:
    """The generators as a job of their own: no roles, no replica groups, no spares (they only sample)."""
    assert spec.roles is not None
    g = spec.roles.generators
    return replace(
        spec,
        roles=None,
        pods=g.pods,
        gpus_per_pod=g.gpus_per_pod,
        replica_groups=None,
        group_size=None,
        spare_groups=0,
        image=g.image or spec.image,
    )


def engines(spec: JobSpec) -> int:
    """The generators' inference engines: tensor_parallel GPUs each, or one per CPU pod (which has no GPUs to split)."""
    assert spec.roles is not None
    g = spec.roles.generators
    return g.pods * g.gpus_per_pod // g.tensor_parallel if g.gpus_per_pod else g.pods


def blame(problem: Problem) -> Problem:
    """A problem a plain job's check found in the trainer's shape, under the key the user wrote."""
    if problem.path[:1] and problem.path[0] in TRAINER_KEYS:
        return replace(problem, path=("roles", TRAINER, *problem.path))
    return problem


def problems(spec: JobSpec) -> list[Problem]:
    """One line for each way the roles cannot be: on the job they sit in, and between the two roles."""
    if spec.roles is None:
        return []
    out = [
        Problem(path=(key,), message=f"comes from roles.trainer in an RL job; drop it and set roles.trainer.{key}")
        for key, given in (
            ("pods", spec.pods != 1),
            ("replica_groups", spec.replica_groups is not None),
            ("group_size", spec.group_size is not None),
        )
        if given
    ]
    if spec.kind != "rayjob":
        out.append(Problem(path=("kind",), message=f"roles make one RayJob, not a {spec.kind}; use kind: rayjob"))
    if spec.regions:
        out.append(
            Problem(
                path=("roles",), message="an RL job runs in one region (across regions is not built yet); drop regions"
            )
        )
    trainer, generators = spec.roles.trainer, spec.roles.generators
    if bool(trainer.gpus_per_pod) != bool(generators.gpus_per_pod):
        which = "generators" if generators.gpus_per_pod == 0 else "trainer"
        out.append(
            Problem(
                path=("roles", which, "gpus_per_pod"),
                message="one role has GPUs and the other none; both roles run in one pool: "
                "give both GPUs, or set gpus_per_pod: 0 on both (a CPU run)",
            )
        )
    tp, gpus = generators.tensor_parallel, generators.gpus_per_pod
    if (gpus == 0 and tp != 1) or (gpus and gpus % tp):
        usable = [d for d in range(1, gpus + 1) if gpus % d == 0] or [1]
        out.append(
            Problem(
                path=("roles", GENERATORS, "tensor_parallel"),
                message=f"{tp} does not divide the generators' gpus_per_pod {gpus} (an engine stays in one pod); "
                f"use {', '.join(map(str, usable))}",
            )
        )
    elif tp > 1 and not selects_vllm(spec.command):
        # Each generator actor asks Ray for tp GPUs (trainer.rl.ray_generators); a torch engine uses one.
        out.append(
            Problem(
                path=("roles", GENERATORS, "tensor_parallel"),
                message=f"{tp} GPUs per engine, but the command does not select vLLM and the "
                f"{names.TORCH_ENGINE} engine (the trainer's default) runs each generator on one GPU; "
                f"set tensor_parallel: 1, or add {VLLM_OVERRIDE} to the command",
            )
        )
    return out


def selects_vllm(command: str | tuple[str, ...] | None) -> bool:
    """Whether the job's command passes the trainer rl.engine=vllm (also as Hydra's +/++ override; the last wins).

    The command line is what gkr can see: a configuration file that selects vLLM lies inside the image."""
    return hydra_value(command, (names.ENGINE_OVERRIDE,)) == names.VLLM_ENGINE
