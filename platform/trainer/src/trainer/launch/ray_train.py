"""Run a training job on a Ray cluster (``run.launcher=ray``): what gkr's RayJob runs in the head pod.

The driver starts the run's Lighthouse beside itself (none with ``ft.lighthouse``: a run across
regions uses the run's own) and a supervisor that places each replica group on its own (placement
group, one actor per rank) and restarts only a group that dies, which heals from a live one
(launch/ray_supervisor.py). Any group shape; ``ft.enabled=false`` is one group that resumes from its newest
durable checkpoint when it restarts.
"""

from __future__ import annotations

import os
import sys

from contract.names import ray_address
from trainer.config import Config
from trainer.launch.ray_supervisor import Supervisor
from trainer.observe.console import Console, outcome_line
from trainer.observe.goodput import combine, dumps
from trainer.observe.runs import committed_target, inner_per_commit, run_dir


def capacity_problem(cfg: Config, resources: dict[str, float]) -> str | None:
    """One line when a Ray cluster of ``resources`` can never hold the run's replica groups (one CPU, and one GPU
    on CUDA, per rank: ray_supervisor.bundle), so it is said at once instead of Ray retrying placements forever."""
    key = "GPU" if cfg.ft.device == "cuda" else "CPU"
    need, have = cfg.ft.replica_groups * cfg.ft.group_size, int(resources.get(key, 0))
    if need <= have:
        return None
    return (
        f"run.launcher=ray: {cfg.ft.replica_groups} replica group(s) of ft.group_size={cfg.ft.group_size} need "
        f"{need} {key}s (one per rank); the local Ray has {have}; lower ft.replica_groups or ft.group_size, "
        "or run on a cluster (RAY_ADDRESS)"
    )


def launch(cfg: Config) -> int:
    import ray

    if not ray.is_initialized():  # in a RayJob (or with RAY_ADDRESS) this joins the cluster; else a local Ray
        # The groups' own output (torchft's logs) stays in Ray's worker logs: the console is the supervisor's.
        ray.init(address=ray_address(os.environ), log_to_driver=False, configure_logging=False)
        # A local Ray (no cluster to join) never grows: a run it cannot hold is refused here. A cluster's workers
        # may still be joining (or autoscaling), so there the supervisor waits for capacity.
        local = ray_address(os.environ) == "local"
        problem = capacity_problem(cfg, ray.cluster_resources()) if local else None  # type: ignore[no-untyped-call]
        if problem is not None:
            ray.shutdown()
            print(f"train.py: {problem}", file=sys.stderr)
            return 2
    out = run_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    console = Console(out, committed_target(cfg), inner_per_step=inner_per_commit(cfg))
    rl = None
    if cfg.run.mode == "rl":  # the controller here, in the driver (the head pod, on the CPU pool)
        from trainer.rl.launch import RLSide

        # On the pod's IP only, which the generators are given: not on its other interfaces (gVNIC, RDMA NICs).
        ip = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        rl = RLSide(cfg, out, host=ip, advertise=ip)
        cfg = rl.config(cfg)
    supervisor = Supervisor(cfg, console, out, rl=rl)
    code = supervisor.run()
    outcome = "completed" if code == 0 else f"{'stopped' if supervisor.final else 'failed'}: {supervisor.why}"
    if rl:
        code, outcome = rl.outcome(code, outcome)
    reports = [r["goodput"] for r in supervisor.reports.values()]
    summary = combine(reports) | {"restarts": sum(supervisor.restarts.values()), "outcome": outcome}
    summary = rl.finish(summary) if rl else summary
    (out / "goodput.json").write_text(dumps(summary))
    print(outcome_line(cfg.run.name, outcome, summary, out), flush=True)
    return code
