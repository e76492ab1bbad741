"""Run a training job under Ray Train: TorchTrainer with Ray's torchft integration.

Each Ray Train worker is one replica group; TorchftConfig runs the torchft
Lighthouse as an actor and hands its address to the workers
($TORCHFT_LIGHTHOUSE). Ray restarts a failed worker, which then heals from
a live peer like a local group does. In the cluster, gkr submits this as a
RayJob (platform/trainer/README.md).
"""

from __future__ import annotations

import os
import time
from typing import Any

from trainer.config import Config, from_dict, to_dict
from trainer.goodput import combine, dumps
from trainer.runs import final_reports, run_dir
from trainer.worker import train


def _worker_loop(config: dict[str, Any]) -> None:
    import ray.train

    cfg = from_dict(config)
    group = ray.train.get_context().get_world_rank()
    report = train(cfg, group, os.environ.get("TORCHFT_LIGHTHOUSE", ""))  # set by TorchftConfig
    ray.train.report({"step": report["step"], "loss": report["loss"], "goodput": report["goodput"]["goodput"]})


def trainer(cfg: Config) -> Any:
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    from ray.train.v2.torch.torchft_config import TorchftConfig

    lighthouse = {"min_replicas": cfg.ft.min_replicas, "heartbeat_timeout_ms": cfg.ft.heartbeat_timeout_ms}
    backend = "nccl" if cfg.ft.device == "cuda" else "gloo"
    # Without fault tolerance: Ray's default torch setup, and no Lighthouse.
    torch_config = TorchftConfig(lighthouse_kwargs=lighthouse, backend=backend) if cfg.ft.enabled else None
    return TorchTrainer(
        train_loop_per_worker=_worker_loop,
        train_loop_config=to_dict(cfg),
        scaling_config=ScalingConfig(num_workers=cfg.ft.replica_groups, use_gpu=cfg.ft.device == "cuda"),
        torch_config=torch_config,
        run_config=RunConfig(
            name=cfg.run.name,
            storage_path=os.path.abspath(cfg.run.report_dir) if "://" not in cfg.run.report_dir else cfg.run.report_dir,
            failure_config=FailureConfig(max_failures=3 if cfg.ft.restart_failed else 0),
        ),
    )


def launch(cfg: Config) -> int:
    os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")  # TorchftConfig belongs to Ray Train v2
    started = time.time()
    result = trainer(cfg).fit()
    out = run_dir(cfg)
    summary = combine(final_reports(out, since=started))  # this run's groups only
    (out / "goodput.json").write_text(dumps(summary))
    print(f"goodput {cfg.run.name}: {summary['goodput']:.1%} over {summary['replica_group_reports']} replica groups")
    return 0 if result.error is None else 1
