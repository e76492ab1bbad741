"""One rank's run in its replica group: fault tolerance and the Trainer, resume, the step loop, checkpoints, events, goodput.

A replica group is ``ft.group_size`` processes (ranks; one per GPU in the cluster) that shard the model
(group.py). With fault tolerance on, groups find each other through the torchft Lighthouse; when one
dies the others shrink the quorum and continue, and its replacement heals from a live peer before it
steps. Rank 0 of a group writes the group's events and reports; every rank writes its own checkpoint
shards.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from trainer.checkpoint import Checkpointer, CheckpointEvent
from trainer.config import Config
from trainer.flops import Window, flops_per_token
from trainer.ft import fault_tolerance
from trainer.goodput import Goodput
from trainer.group import checkpoint_group, join_group, leave_group
from trainer.kube_events import FailureReporter
from trainer.metrics import observer
from trainer.metrics import start as start_metrics
from trainer.nonfinite import NonFiniteStop
from trainer.resume import Root, newest_verified
from trainer.runs import EventLog, high_water, raise_high_water, run_dir
from trainer.trainer import Trainer

log = logging.getLogger("trainer")

# Exit codes of a replica-group process that the local launcher treats as final (never restarted):
# restarting would only repeat them.
EXIT_REFUSED = 2  # checkpoint.dir has step data but nothing that verifies (also train.py's own exit)
EXIT_NONFINITE = 3  # non-finite loss or gradient norm for run.max_nonfinite_steps attempts in a row


def train(cfg: Config, group: int, lighthouse: str) -> dict[str, Any]:
    """Train as replica group `group` until the run's last step commits; returns this group's report."""
    goodput = Goodput()
    started = goodput.clock()
    where = join_group(cfg, group)
    lead = where.rank == 0  # writes the group's events and reports
    live = start_metrics(cfg, group, goodput, run_dir(cfg)) if lead else None
    events = EventLog(
        run_dir(cfg) / (f"events-{group}.jsonl" if lead else f"ranks/events-{group}-{where.rank}.jsonl"), observer(live)
    )
    ft = fault_tolerance(cfg, where, lighthouse)
    trainer = Trainer(cfg, group, ft, where)

    def healed(state: dict[str, Any]) -> None:
        trainer.load_state_dict(state)
        events.write("healed", step=ft.current_step())

    ft.register_state(trainer.state_dict, healed)
    checkpoints = Checkpointer(
        f"{cfg.checkpoint.dir.rstrip('/')}/group-{group}",
        keep=cfg.checkpoint.keep,
        on_event=lambda e: _checkpoint_event(events, e),
        process_group=checkpoint_group(where),  # each rank writes its own shards
    )
    resumed = _resume(cfg, trainer, events)
    replays_up_to = high_water(cfg, group)
    with ft.running(trainer.fragments, trainer.inner, trainer.outer):
        goodput.add("startup", goodput.clock() - started)
        events.write("started", group=group, rank=where.rank, pid=os.getpid(), step=trainer.step, resumed=resumed)
        reporter = FailureReporter(os.environ)
        pending: list[float] = []  # inner steps whose fate the next sync decides
        # DiLoCo: the digest of each fragment just after its last sync, by fragment (DiLoCo syncs fragment
        # step % fragments at committed step `step`, then step + 1 is committed).
        synced_at: list[str | None] = [None] * len(trainer.fragments)
        synced = trainer.step
        every = max(1, cfg.checkpoint.every // ft.inner_steps_per_commit)
        window = throughput_window(cfg, ft.inner_steps_per_commit, goodput.clock)
        window.start(trainer.step)
        while trainer.step < trainer.target:
            step_started = goodput.clock()
            result = trainer.train_step()
            if result.nonfinite is not None:
                events.write(
                    "nonfinite", step=result.inner_step, in_a_row=trainer.guard.in_a_row, error=str(result.nonfinite)
                )
                log.warning("replica group %d: %s", group, result.nonfinite)
                if isinstance(result.nonfinite, NonFiniteStop):
                    checkpoints.close()
                    ft.shutdown()
                    raise result.nonfinite
            if not result.counted:  # a skipped inner step (DiLoCo)
                goodput.step(goodput.clock() - step_started, False, replayed=False)
                continue
            pending.append(goodput.clock() - step_started)
            if not result.synced:
                continue
            step = trainer.step
            committed = step > synced
            failure = ft.failure()
            if not committed and failure is not None and result.nonfinite is None:
                events.write("allreduce_failed", step=step, error=failure)
                reporter.report(f"replica group {group}: collective failed at step {step}: {failure}")
            for seconds in pending:
                goodput.step(seconds, committed, replayed=step <= replays_up_to)
            pending, synced = [], step
            if not committed:
                continue
            # Every committed step, with who took part: what the fault tests assert on.
            events.write("commit", step=step, participants=ft.num_participants())
            if step > trainer.target - len(synced_at):  # the last sync of fragment (step - 1) % fragments
                synced_at[(step - 1) % len(synced_at)] = trainer.fragment_digest((step - 1) % len(synced_at))
            if step % cfg.run.log_every == 0 or step == trainer.target:
                events.write(
                    "step", step=step, loss=round(result.loss, 4), participants=ft.num_participants(),
                    bytes=ft.bytes_sent(), goodput=round(goodput.goodput, 4), **window.close(step), **ft.link_stats(),
                )  # fmt: skip
                if lead:
                    raise_high_water(cfg, group, step)
            if step % every == 0:
                goodput.add("checkpoint", checkpoints.save(step, trainer.state_dict()))
    with goodput.timed("checkpoint"):
        checkpoints.wait()
    checkpoints.close()
    report = {
        "group": group,
        "step": trainer.step,
        "inner_steps": trainer.next_batch,
        "weights": trainer.weights_digest(),  # streaming DiLoCo: differs between groups by design (README)
        "fragments": synced_at,
        "bytes_sent": ft.bytes_sent(),
        **ft.link_stats(),
        "loss": round(trainer.eval_loss(), 4),
        "goodput": goodput.report(),
    }
    events.write("final", **report)
    if lead:
        if live is not None:  # the final metrics in Prometheus text format, for a textfile collector or a push
            live.finish(run_dir(cfg) / f"goodput-{group}.prom")
        log.info(goodput.line(f"{cfg.run.name}/group-{group}"))
    ft.shutdown()
    leave_group(where)
    return report


def throughput_window(cfg: Config, inner_steps_per_commit: int, clock: Callable[[], float]) -> Window:
    """tokens/s and MFU of this group per logging window (flops.py)."""
    return Window(
        tokens_per_step=inner_steps_per_commit * cfg.data.batch_size * cfg.model.seq_len,
        flops_per_token=flops_per_token(cfg.model),
        gpus=int(getattr(cfg.ft, "group_size", 1)),  # the group's GPUs (one rank each)
        peak_tflops=cfg.perf.peak_tflops,
        clock=clock,
    )


def _checkpoint_event(events: EventLog, event: CheckpointEvent) -> None:
    events.write(f"checkpoint_{event.kind}", step=event.step, seconds=round(event.seconds, 4))


def _resume(cfg: Config, trainer: Trainer, events: EventLog) -> int | None:
    """Load the newest verified durable checkpoint of any group and region (never a staged-only or corrupt one).

    None when there is none. Each newer one that fails verification is one log line and one
    ``checkpoint_skipped`` event with its group, step and reason.
    """

    def skipped(root: Root, step: int, reason: str) -> None:
        log.warning("skipping checkpoint %s step %d: %s", root.url, step, reason)
        events.write("checkpoint_skipped", group=root.group, dir=root.base, step=step, reason=reason)

    found = newest_verified(cfg, skipped)
    if found is None:
        return None
    checkpointer, step, root = found
    with checkpointer:
        state = trainer.state_dict()  # the live structure, optimizer state filled in: DCP loads into it in place
        checkpointer.load(step, state)
    trainer.load_state_dict(state)
    events.write("resumed", step=step, dir=root.base, from_group=root.group)  # dir: this run's or another region's
    return step
