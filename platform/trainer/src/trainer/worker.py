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

    resumed = _resume(cfg, checkpoint_state, restore)
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
    pending: list[float] = []  # inner steps whose fate the next sync decides
    synced = manager.current_step()
    with context:
        while manager.current_step() < target:
            step_started = goodput.clock()
            tokens = batches.batch(next_batch()).to(device)
            stepper.zero_grad()
            loss = model.loss(tokens)
            loss.backward()  # type: ignore[no-untyped-call]
            if not diloco:
                allreduce_gradients(manager, model.parameters())
            torch.nn.utils.clip_grad_norm_(model.parameters(), o.grad_clip)
            stepper.step()
            pending.append(goodput.clock() - step_started)
            at_sync = not diloco or context._local_step == 0
            if not at_sync:
                continue
            committed = manager.current_step() > synced
            if not committed and manager.errored() is not None:
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


def _resume(cfg: Config, state: Callable[[], dict[str, Any]], apply: Callable[[dict[str, Any]], None]) -> int | None:
    """Load the newest durable checkpoint of any group (never a staged-only one); None when there is none."""
    found = []
    for g in range(cfg.ft.replica_groups):
        root = f"{cfg.checkpoint.dir.rstrip('/')}/group-{g}"
        step = Checkpointer(root).latest()
        if step is not None:
            found.append((step, root))
    if not found:
        return None
    step, root = max(found)
    target = state()  # the live structure, optimizer state initialized: DCP loads into it in place
    Checkpointer(root).load(step, target)
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
