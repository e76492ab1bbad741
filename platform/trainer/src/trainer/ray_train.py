"""Run a training job under Ray Train: TorchTrainer with torchft.

Replica groups of one worker (``ft.group_size=1``): Ray's ``TorchftConfig`` runs the torchft
Lighthouse as an actor, hands its address to the workers (contract.names.LIGHTHOUSE_ENV) and restarts a
failed worker alone, which heals from a live peer like a local group does. Groups of several workers (one
per GPU), and any group shape in a run across regions (``ft.lighthouse``: the run's Lighthouse, no actor):
``ray_groups.GroupsConfig`` (its docstring says what differs). In the cluster, gkr submits this
as a RayJob (platform/trainer/README.md).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from contract.names import LIGHTHOUSE_ENV
from trainer.config import Config, from_dict, to_dict
from trainer.console import Console, outcome_line
from trainer.goodput import combine, dumps
from trainer.runs import committed_target, final_reports, run_dir
from trainer.worker import train


def _worker_loop(config: dict[str, Any]) -> None:
    import ray.train

    from trainer.ray_groups import group_of

    cfg = from_dict(config)
    context = ray.train.get_context()
    group = context.get_world_rank()
    if cfg.ft.group_size > 1:
        group, _ = group_of(group, cfg.ft.group_size)
        os.environ["LOCAL_RANK"] = str(context.get_local_rank())  # which of the node's GPUs (group.join_group)
    report = train(cfg, group, os.environ.get(LIGHTHOUSE_ENV, ""))  # set by the backend
    ray.train.report({"step": report["step"], "loss": report["loss"], "goodput": report["goodput"]["goodput"]})


def _lighthouse_kwargs(cfg: Config) -> dict[str, Any]:
    return {"min_replicas": cfg.ft.min_replicas, "heartbeat_timeout_ms": cfg.ft.heartbeat_timeout_ms}


def trainer(cfg: Config, lighthouse: str = "") -> Any:
    """The TorchTrainer; ``lighthouse`` is the address of the run's Lighthouse for groups of several workers."""
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    from ray.train.v2.torch.torchft_config import TorchftConfig

    from trainer.ray_groups import GroupsConfig

    backend = "nccl" if cfg.ft.device == "cuda" else "gloo"
    torch_config: Any
    if cfg.ft.group_size > 1 or (cfg.ft.enabled and cfg.ft.lighthouse):
        torch_config = GroupsConfig(
            backend=backend, group_size=cfg.ft.group_size, lighthouse=lighthouse or cfg.ft.lighthouse
        )
    elif cfg.ft.enabled:
        torch_config = TorchftConfig(lighthouse_kwargs=_lighthouse_kwargs(cfg), backend=backend)
    else:
        torch_config = None  # Ray's default torch setup, and no Lighthouse
    return TorchTrainer(
        train_loop_per_worker=_worker_loop,
        train_loop_config=to_dict(cfg),
        scaling_config=ScalingConfig(
            num_workers=cfg.ft.replica_groups * cfg.ft.group_size, use_gpu=cfg.ft.device == "cuda"
        ),
        torch_config=torch_config,
        run_config=RunConfig(
            name=cfg.run.name,
            storage_path=os.path.abspath(cfg.run.report_dir) if "://" not in cfg.run.report_dir else cfg.run.report_dir,
            failure_config=FailureConfig(max_failures=3 if cfg.ft.restart_failed else 0),
        ),
    )


def _follow(console: Console, done: threading.Event) -> None:
    while not done.wait(0.5):
        console.poll()


def launch(cfg: Config) -> int:
    os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")  # TorchftConfig belongs to Ray Train v2
    started = time.time()
    out = run_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    # The console follows the groups' event logs where the driver can read them (a local run, or a
    # report_dir on storage shared with the workers); elsewhere it stays quiet until the outcome.
    console = Console(out, committed_target(cfg))
    done = threading.Event()
    follower = threading.Thread(target=_follow, args=(console, done), daemon=True)
    lighthouse = None
    try:
        address = cfg.ft.lighthouse  # a run across regions: the run's Lighthouse, none of our own
        if cfg.ft.group_size > 1 and cfg.ft.enabled and not address:
            from trainer.ray_groups import start_lighthouse

            lighthouse, address = start_lighthouse(_lighthouse_kwargs(cfg))
        follower.start()
        result = trainer(cfg, address).fit()
    finally:
        done.set()
        if follower.is_alive():
            follower.join()
        if lighthouse is not None:
            import ray

            ray.kill(lighthouse)
    console.poll()
    code = 0 if result.error is None else 1
    outcome = (
        "completed"
        if code == 0
        else f"failed: {str(result.error).splitlines()[0] if str(result.error) else type(result.error).__name__}"
    )
    summary = combine(final_reports(out, since=started)) | {"outcome": outcome}  # this run's groups only
    (out / "goodput.json").write_text(dumps(summary))
    print(outcome_line(cfg.run.name, outcome, summary, out), flush=True)
    return code
