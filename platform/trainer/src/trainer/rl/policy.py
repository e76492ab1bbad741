"""The trainer's RL mode: a replica group's Trainer whose batches are scored groups and whose loss is GRPO.

Everything else is the pretraining Trainer's: the replica groups and torchft (gradients averaged over
the quorum every step, a dead group healed from a live peer), the non-finite guard, DCP checkpoints.
What RL adds (loop/worker.py calls the hooks):

* ``_inputs``: step ``s``'s batch from the controller, fetched before the quorum (it may wait for
  generators); every group gets the same groups, and ``_loss`` takes this group's share of them by its
  place in the quorum (and this rank's share of that);
* the state: ``state_dict()["rl"]`` is the controller's buffer state as of the last committed step (the
  prompt cursor and the prompts issued but not trained), so a checkpoint and a healing peer carry it;
  ``started`` hands it to a fresh controller, which resumes the prompt stream from it;
* ``after_commit``: a snapshot of the weights for the generators (pairs.py serves it on its own thread),
  the step's numbers to the controller for its console line, and, in the one group the controller names
  the step's sender, held-out greedy accuracy of that snapshot on a thread of rank 0 (evaluation.py).
"""

from __future__ import annotations

import os
import secrets
import time
from copy import deepcopy
from typing import Any

import torch

from contract.problem import Invalid
from trainer.config import Config
from trainer.distributed.group import Rank
from trainer.ft.manager import FaultTolerance
from trainer.loop.trainer import Trainer
from trainer.rl.episode import Group, make_batch
from trainer.rl.evaluation import Evaluation, evaluates
from trainer.rl.generate import snapshot
from trainer.rl.grpo import make_task
from trainer.rl.loss import Clip, grpo_loss, response_logprobs
from trainer.rl.pairs import WeightServer
from trainer.rl.service import Client
from trainer.rl.wire import group_from_json


class PolicyTrainer(Trainer):
    def __init__(self, cfg: Config, group: int, ft: FaultTolerance, where: Rank | None = None) -> None:
        super().__init__(cfg, group, ft, where)
        s = cfg.rl
        tokenizer = None
        if s.hf_checkpoint:
            tokenizer = self._load_hf(s.hf_checkpoint)
        self.task = make_task(s, cfg.model.vocab, tokenizer)
        self.allowed = None if self.task.allowed is None else self.task.allowed.to(self.device)
        self.clip = Clip(low=s.clip_low, high=s.clip_high)
        self.reference = deepcopy(self.model).eval() if s.kl_beta > 0 else None  # the starting policy
        self.client = Client(s.controller)
        self.token = f"{os.getpid()}-{secrets.token_hex(4)}"
        self.rl_state = ""  # the buffer state of the last committed step (JSON); "" before the first
        self._batch_state = ""  # the state that the batch being trained brings once its step commits
        self.server: WeightServer | None = None
        self.trained_tokens = 0
        self.step_began = time.perf_counter()
        self.evaluation = Evaluation(cfg.model, self.task, self._evaluated)

    def _load_hf(self, source: str) -> Any:
        from trainer.rl.hf import differences, fetch, load_hf, load_tokenizer

        folder = fetch(source, f"/tmp/meridian-hf/{self.cfg.run.name}") if "://" in source else source
        loaded, state = load_hf(folder)
        changes = differences(loaded, self.cfg.model)
        if changes:  # a bucket's checkpoint, not checked at start: final for the group (exit 2), not retried
            raise Invalid([f"rl.hf_checkpoint: {source} is a different model than the run's; set {' '.join(changes)}"])
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(self.model, dict(state.items()), options=StateDictOptions(full_state_dict=True))
        return load_tokenizer(folder, self.cfg.model.vocab)

    # -- state ---------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return super().state_dict() | {"rl": self.rl_state}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.rl_state = str(state_dict.get("rl") or "")

    # -- the step --------------------------------------------------------------------------------------

    def _inputs(self, index: int) -> list[Group] | None:
        while "groups" not in (answer := self.client.post("/batch", {"step": self.step})):
            if answer.get("done") or answer.get("stop"):  # the run ended (or stopped: the launcher says why)
                return None
            # else "wait": the controller waited POLL_S for generators
        self._batch_state = str(answer["state"])
        self.step_began = time.perf_counter()
        return [group_from_json(g) for g in answer["groups"]]

    def _loss(self, inputs: list[Group]) -> torch.Tensor:
        place, participants = self.ft.participation()
        mine = inputs[place::participants] if place is not None else inputs[:1]  # healing: zeroed by torchft
        mine = mine[self.where.rank :: self.where.size] or mine[:1]
        batch = make_batch(mine).to(self.device)
        temperature, allowed = self.cfg.rl.temperature, self.allowed
        logprobs = response_logprobs(self.model, batch.tokens, batch.mask, allowed, temperature)
        reference = None
        if self.reference is not None:
            with torch.no_grad():
                reference = response_logprobs(self.reference, batch.tokens, batch.mask, allowed, temperature)
        parts = grpo_loss(
            logprobs, batch.sampler_logprobs, batch.advantages, batch.mask,
            clip=self.clip, beta=self.cfg.rl.kl_beta, ref_logprobs=reference,
        )  # fmt: skip
        self.trained_tokens += int(batch.mask.sum())
        return parts.loss

    # -- around the loop -----------------------------------------------------------------------------------

    def started(self, resumed: int | None) -> None:
        weights = self._snapshot()  # a collective in a sharded group: every rank takes part
        if self.where.rank != 0:
            return
        answer = self.client.post(
            "/start", {"group": self.group, "token": self.token, "step": self.step, "state": self.rl_state or None}
        )
        self.server = WeightServer(
            self.client, self.group, self.token, weights, store_port=int(answer["store"]),
            timeout_s=self.cfg.rl.sync_timeout_s, device=self.device,
        )  # fmt: skip
        self.server.offer(self.step, weights)
        self.server.start()
        if self.step == 0 and self.group == 0 and self.task.prompts.held_out:  # a fresh run's baseline, on a thread
            self.evaluation.submit(0, weights)

    def after_commit(self, step: int) -> None:
        self.rl_state = self._batch_state
        train_seconds = time.perf_counter() - self.step_began
        weights = self._snapshot()
        if self.where.rank != 0 or self.server is None:
            return
        self.server.offer(step, weights)
        stats = {
            "trained_tokens": self.trained_tokens * self.where.size,
            "train_seconds": train_seconds,
            "sync_seconds": self.server.last_seconds,
        }
        self.trained_tokens = 0
        answer = self.client.post("/committed", {"group": self.group, "step": step, "stats": stats})
        if evaluates(self.where.rank, bool(answer.get("sender")), step, self.cfg.rl.eval_every, self.target):
            self.evaluation.submit(step, weights)

    def _evaluated(self, step: int, greedy: float, seconds: float) -> None:
        """The evaluation thread's result, to the controller (its console line; launch.py)."""
        self.client.post("/greedy", {"group": self.group, "step": step, "greedy": greedy, "seconds": seconds})

    def _snapshot(self) -> dict[str, torch.Tensor]:
        """A copy of the whole model's weights, taken between steps: what the generators get."""
        if not self.where.sharded:
            return snapshot(self.model)
        return {name: tensor.detach().clone() for name, tensor in self.full_state().items()}

    def close(self) -> None:
        self.evaluation.wait()  # the last step's accuracy reaches the controller before this group leaves
        if self.server is not None:
            self.server.stop()
