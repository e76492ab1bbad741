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
* ``after_commit``: a snapshot of the weights for the generators (the wire dtype, bucket by bucket, kept on
  rank 0 only; pairs.py serves it on its own thread), the step's numbers to the controller for its console
  line, and, in the one group whose report of the step came first, held-out greedy accuracy of that
  snapshot on a thread of rank 0 (evaluation.py).
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
from trainer.rl.episode import make_batch
from trainer.rl.evaluation import Evaluation, evaluates
from trainer.rl.grpo import make_task
from trainer.rl.loss import Aggregation, Clip, entropies, grpo_loss, picked, response_logprobs, token_logprobs
from trainer.rl.pairs import WeightServer, wire
from trainer.rl.service import Client
from trainer.rl.stats import Tally
from trainer.rl.weight_sync import Snapshot, WeightSync, layout, named, snapshot
from trainer.rl.wire import Sent, group_from_json, sent_batch


class PolicyTrainer(Trainer):
    def __init__(self, cfg: Config, group: int, ft: FaultTolerance, where: Rank | None = None) -> None:
        super().__init__(cfg, group, ft, where)
        s = cfg.rl
        tokenizer = None
        if s.hf_checkpoint:
            tokenizer = self._load_hf(s.hf_checkpoint)
        self.task = make_task(s, cfg.model.vocab, tokenizer)
        self.allowed = None if self.task.allowed is None else self.task.allowed.to(self.device)
        self.clip = Clip(low=s.clip_low, high=s.clip_high, dual=s.clip_dual)
        self.reference = deepcopy(self.model).eval() if s.kl_beta > 0 else None  # the starting policy
        self.client = Client(s.controller)
        self.token = f"{os.getpid()}-{secrets.token_hex(4)}"
        self.rl_state = ""  # the buffer state of the last committed step (JSON); "" before the first
        self._batch_state = ""  # the state that the batch being trained brings once its step commits
        self.server: WeightServer | None = None
        self.tally: Tally | None = None  # this rank's share of the step being trained (None: a stand-in)
        self.participants = 1
        self.wait_seconds = 0.0  # waiting for this step's batch, retries included
        # The sync's buckets (the whole model's names and shapes: a DTensor's shape is the global one), on every rank:
        # a sharded group gathers them together; rank 0 keeps them and serves them.
        self.wire, self.bucket_bytes = wire(self.device), s.sync_bucket_mb << 20
        self.buckets, _ = layout(self.model.state_dict(), self.wire, self.bucket_bytes)
        self.step_began = time.perf_counter()
        self.evaluation = Evaluation(cfg.model, self.task, self._evaluated, self.device)

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

    def _inputs(self, index: int) -> Sent | None:
        asked = time.perf_counter()
        while "groups" not in (answer := self.client.post("/batch", {"step": self.step})):
            if answer.get("done") or answer.get("stop"):  # the run ended (or stopped: the launcher says why)
                return None
            # else "wait": the controller waited POLL_S for generators
        self.wait_seconds += time.perf_counter() - asked  # the trainer idle for generation (report.TrainerTime)
        self._batch_state = str(answer["state"])
        self.step_began = time.perf_counter()
        return sent_batch(answer["groups"])

    def _loss(self, inputs: Sent) -> torch.Tensor:
        place, participants = self.ft.participation()
        share = inputs.groups[place::participants] if place is not None else []
        mine = [group_from_json(g) for g in share[self.where.rank :: self.where.size]]
        s = self.cfg.rl
        # The loss is the whole batch's (loss.Aggregation): each share weighed so that the average of the shares'
        # gradients (torchft over the groups, FSDP over a group's ranks) is the batch's. A group healing (torchft
        # zeroes its gradients) or a rank with no group of its own runs a stand-in that weighs nothing: its
        # collectives need the forward and backward.
        aggregation = Aggregation(
            mode=s.loss_agg, horizon=self.task.max_tokens, sequences=inputs.sequences, tokens=inputs.tokens,
            shares=participants * self.where.size if mine else 0,
        )  # fmt: skip
        batch = make_batch(mine or [group_from_json(inputs.groups[0])]).to(self.device)
        temperature, allowed = s.temperature, self.allowed
        distributions = token_logprobs(self.model, batch.tokens, batch.mask, allowed, temperature)
        logprobs = picked(distributions, batch.tokens, batch.mask)
        reference = None
        if self.reference is not None:
            with torch.no_grad():
                reference = response_logprobs(self.reference, batch.tokens, batch.mask, allowed, temperature)
        parts = grpo_loss(
            logprobs, batch.sampler_logprobs, batch.advantages, batch.mask, clip=self.clip, beta=s.kl_beta,
            ref_logprobs=reference, aggregation=aggregation, entropy=entropies(distributions, batch.mask),
        )  # fmt: skip
        self.tally = parts.tally if mine else None  # the last attempt's: what commits
        self.participants = participants
        return parts.loss

    def _group_tally(self) -> Tally | None:
        """The group's share of the committed step, its ranks' tallies summed (a collective in a sharded group)."""
        if not self.where.sharded:
            return self.tally
        import torch.distributed as dist

        t = self.tally or Tally()
        sums = [t.tokens, t.clipped, t.dual_clipped, t.ratio_sum, t.entropy_sum, t.kl_sampler_sum, t.kl_reference_sum]
        total = torch.tensor([float(x or 0.0) for x in sums], dtype=torch.float64, device=self.device)
        peak = torch.tensor([t.ratio_max], dtype=torch.float64, device=self.device)
        dist.all_reduce(total)  # the group's own process group (distributed/group.py)
        dist.all_reduce(peak, op=dist.ReduceOp.MAX)
        n, clipped, dual, ratio, entropy, sampler, reference = total.tolist()
        if n == 0:
            return None
        return Tally(
            tokens=int(n), clipped=int(clipped), dual_clipped=int(dual), ratio_sum=ratio, ratio_max=float(peak),
            entropy_sum=entropy, kl_sampler_sum=sampler, kl_reference_sum=reference if self.cfg.rl.kl_beta > 0 else None,
        )  # fmt: skip

    # -- around the loop -----------------------------------------------------------------------------------

    def started(self, resumed: int | None) -> None:
        weights = self._snapshot()  # a collective in a sharded group: every rank takes part
        if self.where.rank != 0:
            return
        answer = self.client.post(
            "/start", {"group": self.group, "token": self.token, "step": self.step, "state": self.rl_state or None}
        )
        sync = WeightSync(
            self.model.state_dict(), src=0, dtype=self.wire, device=self.device, bucket_bytes=self.bucket_bytes
        )
        self.server = WeightServer(
            self.client, self.group, self.token, sync, store_port=int(answer["store"]),
            timeout_s=self.cfg.rl.sync_timeout_s, device=self.device,
        )  # fmt: skip
        self.server.offer(self.step, weights)
        self.server.start()
        if answer.get("baseline") and self.task.prompts.held_out:  # a fresh run's baseline, on a thread
            self.evaluation.submit(0, named(self.buckets, weights))

    def after_commit(self, step: int) -> None:
        self.rl_state = self._batch_state
        train_seconds = time.perf_counter() - self.step_began
        tally = self._group_tally()
        weights = self._snapshot()
        if self.where.rank != 0 or self.server is None:
            return
        self.server.offer(step, weights)
        stats = {
            "tally": None if tally is None else tally.to_json(),  # the controller merges the groups' (stats.py)
            "participants": self.participants,
            "train_seconds": train_seconds,
            "sync_seconds": self.server.last_seconds,
            "wait_seconds": self.wait_seconds,
        }
        self.wait_seconds = 0.0
        answer = self.client.post("/committed", {"group": self.group, "step": step, "stats": stats})
        if evaluates(self.where.rank, bool(answer.get("evaluates")), step, self.cfg.rl.eval_every, self.target):
            self.evaluation.submit(step, named(self.buckets, weights))

    def _evaluated(self, step: int, greedy: float, seconds: float) -> None:
        """The evaluation thread's result, to the controller (its console line; launch.py)."""
        self.client.post("/greedy", {"group": self.group, "step": step, "greedy": greedy, "seconds": seconds})

    def _snapshot(self) -> Snapshot:
        """The weights the generators get, taken between steps: the whole model in the wire dtype on rank 0, bucket
        by bucket (a sharded group gathers each tensor in the wire dtype, every rank taking part); nothing kept on
        the other ranks. Never a full fp32 copy (weight_sync.snapshot)."""
        return snapshot(self.buckets, self.model.state_dict(), self.wire, keep=self.where.rank == 0)

    def close(self) -> None:
        self.evaluation.wait()  # the last step's accuracy reaches the controller before this group leaves
        if self.server is not None:
            self.server.stop()
