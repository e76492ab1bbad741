"""One replica group's training loop: torchft Manager, DDP or DiLoCo, staged checkpoints, goodput.

A replica group is one process here (CPU, gloo) and one Ray Train worker in
the cluster. Groups find each other through the torchft Lighthouse; when one
dies the others shrink the quorum and continue, and its replacement heals
from a live peer (model, optimizers, DiLoCo's outer state) before it steps.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import math
import os
import random
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from trainer.checkpoint import Checkpointer, CheckpointEvent
from trainer.config import Config
from trainer.data import Batches
from trainer.goodput import Goodput
from trainer.gradsync import allreduce_gradients
from trainer.kube_events import FailureReporter
from trainer.model import LanguageModel
from trainer.runs import read_events

log = logging.getLogger("trainer")

# Exit codes of a replica-group process that the local launcher treats as final (never restarted):
# restarting would only repeat them.
EXIT_REFUSED = 2  # checkpoint.dir has step data but nothing that verifies (also train.py's own exit)
EXIT_NONFINITE = 3  # non-finite loss or gradient norm for run.max_nonfinite_steps attempts in a row


class NonFiniteError(RuntimeError):
    """A step's loss or gradient norm is NaN or infinite: what torchft is told, so the step does not commit."""


class NonFiniteStop(NonFiniteError):
    """Non-finite for run.max_nonfinite_steps attempts in a row: the group stops (EXIT_NONFINITE)."""


class NonFiniteGuard:
    """Counts attempts in a row whose loss or total gradient norm is not finite (pure, no I/O)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_a_row = 0

    def check(self, step: int, loss: float, grad_norm: float) -> NonFiniteError | None:
        """None for a finite attempt; otherwise the error to report (NonFiniteStop once it persisted)."""
        if math.isfinite(loss) and math.isfinite(grad_norm):
            self.in_a_row = 0
            return None
        self.in_a_row += 1
        what = f"non-finite loss {loss} / gradient norm {grad_norm} at step {step}"
        if self.in_a_row >= self.limit:
            return NonFiniteStop(
                f"{what}, {self.in_a_row} attempts in a row (run.max_nonfinite_steps={self.limit}): stopping; "
                "the last durable checkpoint is untouched; lower optim.lr or fix the data, then resume"
            )
        return NonFiniteError(f"{what} ({self.in_a_row} in a row): not committed, retrying")


class EventLog:
    """JSON lines per replica group: steps, heals, checkpoints, the final weights. Tests and reports read it."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = path.open("a", buffering=1)

    def write(self, event: str, **fields: Any) -> None:
        self.file.write(json.dumps({"event": event, "time": time.time(), **fields}) + "\n")


def run_dir(cfg: Config) -> Path:
    return Path(cfg.run.report_dir) / cfg.run.name


def final_reports(out: Path) -> list[dict[str, Any]]:
    """The goodput reports of every replica-group process that finished, from their event logs."""
    groups = sorted(int(p.stem.split("-", 1)[1]) for p in out.glob("events-*.jsonl"))
    return [e["goodput"] for g in groups for e in read_events(out, g) if e["event"] == "final"]


def weights_digest(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def _process_group(cfg: Config) -> Any:
    from torchft import ProcessGroupGloo
    from torchft.process_group import ProcessGroupBabyNCCL

    timeout = timedelta(seconds=cfg.ft.timeout_s)
    return ProcessGroupBabyNCCL(timeout=timeout) if cfg.ft.device == "cuda" else ProcessGroupGloo(timeout=timeout)


class Counted:
    """Bytes this group sent into all-reduces: the communication a step costs."""

    def __init__(self, manager: Any) -> None:
        self.bytes = 0
        original = manager.allreduce

        def allreduce(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            self.bytes += tensor.numel() * tensor.element_size()
            return original(tensor, *args, **kwargs)

        manager.allreduce = allreduce


def train(cfg: Config, group: int, lighthouse: str) -> dict[str, Any]:
    """Train as replica group `group` until the run's last step commits; returns this group's report."""
    from torch.distributed import TCPStore  # type: ignore[attr-defined]
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )
    from torchft import Manager, Optimizer
    from torchft.local_sgd import DiLoCo

    goodput = Goodput()
    started = goodput.clock()
    events = EventLog(run_dir(cfg) / f"events-{group}.jsonl")
    torch.manual_seed(cfg.run.seed)  # identical initial weights in every group
    random.seed(cfg.run.seed)
    device = torch.device("cuda" if cfg.ft.device == "cuda" else "cpu")
    model = LanguageModel(cfg.model).to(device)
    o = cfg.optim
    inner = torch.optim.AdamW(model.parameters(), lr=o.lr, weight_decay=o.weight_decay, betas=o.betas)
    diloco = o.algorithm == "diloco"
    fragments = model.fragments(o.fragments) if diloco else []
    outer = [
        torch.optim.SGD(f.parameters(), lr=o.outer_lr, momentum=o.outer_momentum, nesterov=o.nesterov)
        for f in fragments
    ]
    batches = Batches(cfg.data, cfg.model.seq_len, cfg.model.vocab, group)

    def user_state() -> dict[str, Any]:
        # What a healing peer fetches. torchft's HTTP transport serves the tensors it is handed until the
        # peer has read them, and on CPU it does not copy them first: without a snapshot, a peer reading
        # while this group takes its next optimizer step gets a mix of two steps (and diverges).
        live = {"model": model.state_dict(), "inner": inner.state_dict(), "outer": [x.state_dict() for x in outer]}
        return copy.deepcopy(live)

    def load_user_state(state: dict[str, Any]) -> None:
        model.load_state_dict(state["model"])
        inner.load_state_dict(state["inner"])
        for optimizer, saved in zip(outer, state["outer"], strict=True):
            optimizer.load_state_dict(saved)
        events.write("healed", step=manager.current_step())

    # A replica group is one process: its store is its own (multi-rank groups are not built).
    store = TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
    manager = Manager(
        pg=_process_group(cfg),
        load_state_dict=load_user_state,
        state_dict=user_state,
        min_replica_size=cfg.ft.min_replicas,
        use_async_quorum=not diloco,  # DiLoCo needs the quorum settled before it syncs
        timeout=timedelta(seconds=cfg.ft.timeout_s),
        quorum_timeout=timedelta(seconds=cfg.ft.quorum_timeout_s),
        rank=0,
        world_size=1,
        store_addr="localhost",
        store_port=store.port,
        lighthouse_addr=lighthouse,
        replica_id=f"{cfg.run.name}-{group}",
    )
    sent = Counted(manager)
    checkpoints = Checkpointer(
        f"{cfg.checkpoint.dir.rstrip('/')}/group-{group}",
        keep=cfg.checkpoint.keep,
        on_event=lambda e: _checkpoint_event(events, e),
    )

    # torchft syncs one fragment every sync_every / fragments inner steps; each sync is one manager step.
    per_sync = o.sync_every // o.fragments if diloco else 1
    context: Any = _Nothing()  # DiLoCo, once the state is final (it copies the parameters when built)

    def next_batch() -> int:
        return int(manager.current_step()) * per_sync + int(context._local_step)

    def checkpoint_state() -> dict[str, Any]:
        return {
            "model": get_model_state_dict(model),
            "inner": get_optimizer_state_dict(model, inner),
            "outer": [get_optimizer_state_dict(f, x) for f, x in zip(fragments, outer, strict=True)],
            "manager": manager.state_dict(),
            "data": {"group": group, "next_batch": next_batch()},
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
        }

    def restore(saved: dict[str, Any]) -> None:
        set_model_state_dict(model, saved["model"])
        set_optimizer_state_dict(model, inner, saved["inner"])
        for f, x, s in zip(fragments, outer, saved["outer"], strict=True):
            set_optimizer_state_dict(f, x, s)
        manager.load_state_dict(saved["manager"])
        torch.set_rng_state(saved["rng"]["torch"])
        random.setstate(saved["rng"]["python"])

    resumed = _resume(cfg, checkpoint_state, restore, events)
    if resumed is not None:
        events.write("resumed", step=resumed)
    high_water = _high_water(cfg, group)
    if diloco:
        context = DiLoCo(
            manager, fragments, inner, outer, sync_every=o.sync_every, fragment_sync_delay=o.fragment_sync_delay
        )
        stepper, target = inner, -(-cfg.run.steps // per_sync)
    else:
        stepper, target = Optimizer(manager, inner), cfg.run.steps
    goodput.add("startup", goodput.clock() - started)
    events.write("started", group=group, step=manager.current_step(), resumed=resumed)

    reporter = FailureReporter(os.environ)
    guard = NonFiniteGuard(cfg.run.max_nonfinite_steps)
    injected = 0
    pending: list[float] = []  # inner steps whose fate the next sync decides
    synced = manager.current_step()
    with context:
        while manager.current_step() < target:
            step_started = goodput.clock()
            inner_step = next_batch() + 1
            tokens = batches.batch(inner_step - 1).to(device)
            stepper.zero_grad()
            loss = model.loss(tokens)
            if inner_step == cfg.run.inject_nan_at_step and injected < cfg.run.inject_nan_times:
                injected += 1  # documented fault injection (run.inject_nan_*), off by default
                loss = loss * float("nan")
            loss.backward()  # type: ignore[no-untyped-call]
            if not torch.isfinite(loss):
                # Carry it into the all-reduce: every group of this step's quorum then sees a non-finite
                # norm and refuses to commit (should_commit is decided per group, not per quorum).
                for p in model.parameters():
                    if p.grad is not None:
                        p.grad.fill_(float("nan"))
            if not diloco:
                allreduce_gradients(manager, model.parameters())
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), o.grad_clip)
            nonfinite = guard.check(inner_step, loss.item(), grad_norm.item())
            if nonfinite is not None:
                # Before the optimizer step, so should_commit() says no and the weights stay as they were.
                manager.report_error(nonfinite)
                events.write("nonfinite", step=inner_step, in_a_row=guard.in_a_row, error=str(nonfinite))
                log.warning("replica group %d: %s", group, nonfinite)
                if isinstance(nonfinite, NonFiniteStop):
                    checkpoints.close()
                    manager.shutdown(wait=False)
                    raise nonfinite
                if diloco:  # an inner step: skip it (torchft's start_quorum would clear the report anyway)
                    stepper.zero_grad()
                    goodput.step(goodput.clock() - step_started, False, replayed=False)
                    continue
            stepper.step()
            pending.append(goodput.clock() - step_started)
            at_sync = not diloco or context._local_step == 0
            if not at_sync:
                continue
            committed = manager.current_step() > synced
            if not committed and manager.errored() is not None and nonfinite is None:
                failure = str(manager.errored().original_exception).splitlines()[0][:300]
                events.write("allreduce_failed", step=manager.current_step(), error=failure)
                reporter.report(f"replica group {group}: collective failed at step {manager.current_step()}: {failure}")
            for seconds in pending:
                goodput.step(seconds, committed, replayed=manager.current_step() <= high_water)
            pending, synced = [], manager.current_step()
            step = synced
            if committed:  # every committed step, with who took part: what fault tests assert on
                events.write("commit", step=step, participants=manager.num_participants())
            if committed and (step % cfg.run.log_every == 0 or step == target):
                events.write(
                    "step", step=step, loss=round(loss.item(), 4), participants=manager.num_participants(),
                    bytes=sent.bytes,
                )  # fmt: skip
                _write_high_water(cfg, group, step)
            if committed and step % max(1, cfg.checkpoint.every // per_sync) == 0:
                goodput.add("checkpoint", checkpoints.save(step, checkpoint_state()))
    with goodput.timed("checkpoint"):
        checkpoints.wait()
    checkpoints.close()
    report = {
        "group": group,
        "step": manager.current_step(),
        "inner_steps": next_batch(),
        "weights": weights_digest(model),
        "bytes_sent": sent.bytes,
        "loss": round(_eval_loss(model, batches, device), 4),
        "goodput": goodput.report(),
    }
    events.write("final", **report)
    # Prometheus text format, for node-exporter's textfile collector or a push.
    (run_dir(cfg) / f"goodput-{group}.prom").write_text(goodput.prometheus(cfg.run.name, str(group)))
    log.info(goodput.line(f"{cfg.run.name}/group-{group}"))
    manager.shutdown(wait=False)
    return report


class _Nothing:
    _local_step = 0

    def __enter__(self) -> _Nothing:
        return self

    def __exit__(self, *args: object) -> None:
        return None


def _checkpoint_event(events: EventLog, event: CheckpointEvent) -> None:
    events.write(f"checkpoint_{event.kind}", step=event.step, seconds=round(event.seconds, 4))


def _group_roots(cfg: Config) -> list[str]:
    return [f"{cfg.checkpoint.dir.rstrip('/')}/group-{g}" for g in range(cfg.ft.replica_groups)]


def _newest_verified(cfg: Config, on_skip: Callable[[int, int, str], None]) -> tuple[Checkpointer, int] | None:
    """The newest checkpoint of any group that verifies; ``on_skip(group, step, reason)`` for newer ones that do not."""
    checkpointers = [Checkpointer(root) for root in _group_roots(cfg)]
    candidates = sorted(((s, g) for g, c in enumerate(checkpointers) for s in c.committed()), reverse=True)
    found = None
    for step, g in candidates:
        reason = checkpointers[g].verify(step)
        if reason is None:
            found = (checkpointers[g], step)
            break
        on_skip(g, step, reason)
    for c in checkpointers:
        if found is None or c is not found[0]:
            c.close()
    return found


def start_refusal(cfg: Config) -> str | None:
    """Why a run must not start on checkpoint.dir, as one line; None when it may.

    Step data with nothing that verifies (markers deleted, every checkpoint corrupt) would otherwise
    restart at step 0 and overwrite that history without a word.
    """
    skipped: list[str] = []
    found = _newest_verified(cfg, lambda g, s, r: skipped.append(f"group-{g} step {s}: {r}"))
    if found is not None:
        found[0].close()
        return None
    if cfg.checkpoint.start_over:
        return None
    if not any(_has_step_data(root) for root in _group_roots(cfg)):
        return None
    why = skipped[0] if skipped else "no COMMITTED marker"
    return (
        f"checkpoint.dir {cfg.checkpoint.dir}: step-* directories but no checkpoint that verifies ({why}); "
        "move the directory away to keep it, or set checkpoint.start_over=true to train from step 0 there"
    )


def _has_step_data(root: str) -> bool:
    with Checkpointer(root) as checkpointer:
        return checkpointer.has_step_data()


def _resume(
    cfg: Config, state: Callable[[], dict[str, Any]], apply: Callable[[dict[str, Any]], None], events: EventLog
) -> int | None:
    """Load the newest verified durable checkpoint of any group (never a staged-only or corrupt one).

    None when there is none. Each newer one that fails verification is one log line and one
    ``checkpoint_skipped`` event with its group, step and reason.
    """

    def skipped(g: int, step: int, reason: str) -> None:
        log.warning("skipping checkpoint group-%d step %d: %s", g, step, reason)
        events.write("checkpoint_skipped", group=g, step=step, reason=reason)

    found = _newest_verified(cfg, skipped)
    if found is None:
        return None
    checkpointer, step = found
    with checkpointer:
        target = state()  # the live structure, optimizer state initialized: DCP loads into it in place
        checkpointer.load(step, target)
    apply(target)
    return step


def _high_water(cfg: Config, group: int) -> int:
    path = run_dir(cfg) / f"progress-{group}.json"
    return int(json.loads(path.read_text())["step"]) if path.exists() else -1


def _write_high_water(cfg: Config, group: int, step: int) -> None:
    path = run_dir(cfg) / f"progress-{group}.json"
    if step > _high_water(cfg, group):
        path.write_text(json.dumps({"step": step}))


@torch.no_grad()
def _eval_loss(model: LanguageModel, batches: Batches, device: torch.device) -> float:
    """Loss on held-out batches (indices no training step uses)."""
    losses = [model.loss(batches.batch(10**9 + i).to(device)).item() for i in range(4)]
    return sum(losses) / len(losses)
