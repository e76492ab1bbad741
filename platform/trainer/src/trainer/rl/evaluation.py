"""Held-out greedy evaluation in the distributed run: one place, off the training step's critical path.

Only the rank 0 of the group whose report of a step reached the controller first (exactly one per step,
whichever groups are in its quorum) evaluates, and it evaluates the snapshot it just took for the
generators, not the (possibly sharded) training model, on a thread of its own: the next step starts at
once, and no other group or rank spends anything on it. Costs: the thread shares the rank's cores or
GPU with training while it runs (and, on a GPU, one copy of the model in the wire dtype, bf16: the snapshot
is in host memory, and the evaluation reads the weights the generators get); the snapshot it reads stays alive until it is done (one more copy of
the weights at most, when a newer snapshot is offered meanwhile); a new evaluation waits for the one
before it (on the critical path only when one evaluation takes longer than ``rl.eval_every`` steps).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

import torch

from trainer.config import Model
from trainer.model.transformer import LanguageModel
from trainer.rl.grpo import Task, greedy_accuracy

log = logging.getLogger("trainer")

Report = Callable[[int, float, float], None]  # (step, greedy accuracy, seconds it took)


def due(step: int, every: int, last: int) -> bool:
    """Whether step ``step``'s policy is evaluated: every ``rl.eval_every`` steps, and the run's last one."""
    return step % every == 0 or step == last


def evaluates(rank: int, first: bool, step: int, every: int, last: int) -> bool:
    """The one place that evaluates a due step: rank 0 of the group whose report of it came ``first``."""
    return rank == 0 and first and due(step, every, last)


class Evaluation:
    """Greedy accuracy of snapshots on the held-out problems, one at a time, on a thread; ``report`` gets each."""

    def __init__(self, cfg: Model, task: Task, report: Report, device: str | torch.device = "cpu") -> None:
        self.cfg, self.task, self.report, self.device = cfg, task, report, torch.device(device)
        self.thread: threading.Thread | None = None

    def submit(self, step: int, weights: Mapping[str, torch.Tensor]) -> None:
        """Evaluate ``weights`` (the whole model's, by parameter name; read, never written) as step ``step``."""
        self.wait()
        self.thread = threading.Thread(target=self._run, args=(step, weights), name=f"evaluation-{step}", daemon=True)
        self.thread.start()

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()
            self.thread = None

    def _run(self, step: int, weights: Mapping[str, torch.Tensor]) -> None:
        began = time.perf_counter()
        try:
            with torch.device("meta"):
                model = LanguageModel(self.cfg)
            model.load_state_dict(dict(weights), assign=True)  # the snapshot's own tensors: no copy on the CPU
            # The snapshot is in host memory (weight_sync.snapshot): on a GPU rank the evaluation takes one copy of
            # the model in the wire dtype (bf16: 16 GB at 8B) on the device for its duration.
            model = model.to(self.device)
            accuracy = greedy_accuracy(model.eval(), self.task.prompts.held_out, self.task)
            self.report(step, accuracy, time.perf_counter() - began)
        except Exception as error:  # a thread's failure must not pass silently, nor stop training
            log.warning("evaluation of step %d failed: %s: %s", step, type(error).__name__, str(error)[:300])
