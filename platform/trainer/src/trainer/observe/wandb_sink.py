"""Weights & Biases, optional (``logging.wandb=true``): each logging window's run metrics, one W&B run per group.

Imported only when turned on, so wandb is an optional extra of the package (``meridian-trainer[wandb]``).
The API key and mode come from wandb's own environment (WANDB_API_KEY, WANDB_MODE=offline, WANDB_DIR);
the groups of a run share a W&B group named after the run.
"""

from __future__ import annotations

from typing import Any

import wandb

from trainer.config import Config, to_dict


class WandbSink:
    def __init__(self, cfg: Config, group: int) -> None:
        self.run: Any = wandb.init(
            project=cfg.logging.wandb_project,
            entity=cfg.logging.wandb_entity or None,
            name=f"{cfg.run.name}-group-{group}",
            group=cfg.run.name,
            config=to_dict(cfg),
            # A restarted group continues its W&B run rather than starting a second one.
            id=f"{cfg.run.name}-group-{group}",
            resume="allow",
        )

    def log(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def finish(self) -> None:
        self.run.finish()
