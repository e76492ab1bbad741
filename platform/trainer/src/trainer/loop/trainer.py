"""The Trainer: one replica group's model, optimizers and data position, with one state_dict for healing and checkpoints.

Shaped like torchtitan's trainer: a ``Stateful`` object whose ``state_dict()`` is both what a healing
peer fetches (through torchft) and what a checkpoint holds (through DCP), and whose
``load_state_dict()`` applies either. Fault tolerance is a separate object (ft/manager.py) that takes the same
calls whether it is on or off. The driver around it is loop/worker.py (events and goodput: loop/progress.py, loop/ledger.py; checkpoints: checkpoint/).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.tensor import DTensor

from trainer.config import Config
from trainer.data.batches import Batches
from trainer.distributed.group import Rank, shard
from trainer.ft.manager import FaultTolerance
from trainer.loop.nonfinite import NonFiniteError, NonFiniteGuard, NonFiniteStop
from trainer.model.transformer import LanguageModel


@dataclass(frozen=True)
class Step:
    """What one call of ``train_step`` did."""

    inner_step: int  # 1-based: the batch's index + 1
    loss: float
    nonfinite: NonFiniteError | None  # reported, so the step did not commit; NonFiniteStop: nothing was stepped
    counted: bool  # an inner step was taken (or, DDP, attempted): it counts towards the next sync
    synced: bool  # it ended a sync period: the committed step moved on, or the attempt failed as a whole


class Trainer(Stateful):
    """Model, inner optimizer (AdamW), DiLoCo's outer optimizers, the data position and the RNGs of one replica group."""

    def __init__(self, cfg: Config, group: int, ft: FaultTolerance, where: Rank | None = None) -> None:
        torch.manual_seed(cfg.run.seed)  # identical initial weights in every group (and every rank, before sharding)
        random.seed(cfg.run.seed)
        self.cfg, self.group, self.ft = cfg, group, ft
        self.where = where or Rank(group)
        self.device = torch.device("cuda" if cfg.ft.device == "cuda" else "cpu")
        self.model = LanguageModel(cfg.model).to(self.device)
        if self.where.sharded:
            shard(self.model, list(self.model.blocks), cfg)  # before the optimizers: they hold the shards
        o = cfg.optim
        self.inner = torch.optim.AdamW(self.model.parameters(), lr=o.lr, weight_decay=o.weight_decay, betas=o.betas)
        # DiLoCo: one outer optimizer per fragment (streaming DiLoCo syncs fragments in turn); none for DDP.
        self.fragments = self.model.fragments(o.fragments) if o.algorithm == "diloco" else []
        self.outer = [
            torch.optim.SGD(f.parameters(), lr=o.outer_lr, momentum=o.outer_momentum, nesterov=o.nesterov)
            for f in self.fragments
        ]
        self.batches = Batches(cfg.data, cfg.model.seq_len, cfg.model.vocab, group)
        self.guard = NonFiniteGuard(cfg.run.max_nonfinite_steps)
        # Inner steps taken since the last sync (DiLoCo). Our own count: DiLoCo keeps one privately.
        self.since_sync = 0
        self.target = -(-cfg.run.steps // ft.inner_steps_per_commit)  # committed steps for run.steps inner steps
        self.injected = 0

    @property
    def step(self) -> int:
        """Committed steps."""
        return self.ft.current_step()

    @property
    def next_batch(self) -> int:
        """Index of the next batch. It follows from the committed step, so a retried, healed or resumed step
        sees exactly the batch it would have."""
        return self.ft.current_step() * self.ft.inner_steps_per_commit + self.since_sync

    # -- one state for healing and checkpoints ---------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything this group's training depends on, in DCP's form (parameters by fully qualified name).

        Called on the training thread for checkpoints and by torchft's quorum thread when a peer heals from
        this group (ft/manager.py hands out a copy). DCP fills an optimizer without state by stepping it with zero
        gradients, which must not race the training thread: only a group past step 0 serves peers (ft/manager.py:
        init_sync=False), so its AdamW has state, and DiLoCo's quorums run while the training thread waits.
        """
        return {
            "model": get_model_state_dict(self.model),
            "inner": get_optimizer_state_dict(self.model, self.inner),
            "outer": [get_optimizer_state_dict(f, x) for f, x in zip(self.fragments, self.outer, strict=True)],
            "manager": self.ft.state_dict(),
            "data": {"group": self.group, "next_batch": self.next_batch},
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Apply a peer's state (healing) or a loaded checkpoint (resume)."""
        set_model_state_dict(self.model, state_dict["model"])
        set_optimizer_state_dict(self.model, self.inner, state_dict["inner"])
        for f, x, saved in zip(self.fragments, self.outer, state_dict["outer"], strict=True):
            set_optimizer_state_dict(f, x, saved)
        self.ft.load_state_dict(state_dict["manager"])
        # A peer serves its state from inside a step, as the healing group loads it: both are equally far
        # into the sync period. A checkpoint is taken at a sync (0). Anything else (sync_every changed
        # since) restarts the period, as DiLoCo's own count does.
        since = int(state_dict["data"]["next_batch"]) - self.ft.current_step() * self.ft.inner_steps_per_commit
        self.since_sync = since if 0 <= since < self.ft.inner_steps_per_commit else 0
        torch.set_rng_state(state_dict["rng"]["torch"])
        random.setstate(state_dict["rng"]["python"])

    # -- training ---------------------------------------------------------------------------------

    def train_step(self) -> Step | None:
        """One inner step on the next batch: forward, backward, the non-finite guard, then the optimizer if allowed.

        None: there is nothing more to train (RL: the run finished without this group).
        """
        index = self.next_batch
        inputs = self._inputs(index)
        if inputs is None:
            return None
        self.ft.begin_step()
        self.inner.zero_grad()
        loss = self._loss(inputs)
        run = self.cfg.run
        if index + 1 == run.inject_nan_at_step and self.injected < run.inject_nan_times:
            self.injected += 1  # documented fault injection (run.inject_nan_*), off by default
            loss = loss * float("nan")
        loss.backward()  # type: ignore[no-untyped-call]
        if not torch.isfinite(loss):
            # Carry it into the all-reduce: every group of this step's quorum then sees a non-finite
            # norm and refuses to commit (should_commit is decided per group, not per quorum).
            for p in self.model.parameters():
                if p.grad is not None:
                    p.grad.fill_(float("nan"))
        self.ft.sync_gradients(self.model.parameters())
        grad_norm = self._clip_gradients()
        nonfinite = self.guard.check(index + 1, loss.item(), grad_norm.item())
        if nonfinite is not None:
            self.ft.report_error(nonfinite)  # before the optimizer step: the weights stay as they were
            if isinstance(nonfinite, NonFiniteStop):
                return Step(index + 1, loss.item(), nonfinite, counted=False, synced=False)
        counted = self.ft.step(self.inner)
        if counted:
            self.since_sync = (self.since_sync + 1) % self.ft.inner_steps_per_commit
        return Step(index + 1, loss.item(), nonfinite, counted, synced=counted and self.since_sync == 0)

    def _inputs(self, index: int) -> Any:
        """Batch ``index``'s part for this rank, fetched before the quorum (RL: it may wait for generators)."""
        # Each rank of a group takes its equal part of the group's batch: the group's step is the same
        # whatever its size (FSDP2 averages the gradients inside the group).
        return self.batches.batch(index).chunk(self.where.size)[self.where.rank].to(self.device)

    def _loss(self, inputs: Any) -> torch.Tensor:
        """The step's loss, after the quorum started (a subclass may need the quorum's shape)."""
        loss: torch.Tensor = self.model.loss(inputs)
        return loss

    # -- what a mode adds around the loop (RL: trainer/rl/policy.py) --------------------------------------

    def started(self, resumed: int | None) -> None:
        """The group is about to take its first step (after a resume, if any)."""

    def after_commit(self, step: int) -> None:
        """Step ``step`` committed (``step`` committed steps now), before its checkpoint."""

    def close(self) -> None:
        """The run is over for this group."""

    def _clip_gradients(self) -> torch.Tensor:
        """Clip to optim.grad_clip; the norm over the whole model (all of a sharded group's shards)."""
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads)
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()  # the shards' partial norms, reduced over the group
        torch.nn.utils.clip_grads_with_norm_(self.model.parameters(), self.cfg.optim.grad_clip, norm)
        return norm

    # -- reports ----------------------------------------------------------------------------------

    def full_state(self) -> dict[str, Any]:
        """The whole model's weights on every rank (a collective in a sharded group)."""
        if not self.where.sharded:
            return self.model.state_dict()
        return dict(get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True)))

    def weights_digest(self) -> str:
        return digest(self.full_state())

    @torch.no_grad()
    def fragment_digest(self, index: int) -> str:
        """Digest of DiLoCo fragment ``index``'s whole (gathered) parameters, named as in the model.

        Streaming DiLoCo makes a fragment identical across groups only at its own sync: call this right after
        it (a collective in a sharded group: every rank of the group calls it at the same step).
        """
        names = {id(p): name for name, p in self.model.named_parameters()}
        return digest({names[id(p)]: _full(p) for p in self.fragments[index].parameters()})

    @torch.no_grad()
    def eval_loss(self) -> float:
        """Loss on held-out batches (indices no training step uses)."""
        losses = [self.model.loss(self.batches.batch(10**9 + i).to(self.device)).item() for i in range(4)]
        return sum(losses) / len(losses)


def _full(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def digest(tensors: dict[str, torch.Tensor]) -> str:
    """sha256 over the sorted names and their tensors' bytes: the ``weights`` of a group's final report."""
    found = hashlib.sha256()
    for name, tensor in sorted(tensors.items()):
        found.update(name.encode())
        found.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return found.hexdigest()
