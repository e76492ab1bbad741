"""One rank's run in its replica group: fault tolerance and the Trainer, resume, the step loop, checkpoints, events, goodput.

``train`` is the protocol, in torchtitan's shape; the decisions belong to its parts: the Checkpointer
keeps its own cadence (checkpoint/), ``Progress`` the goodput accounting and the logging windows
(loop/progress.py), the ``Ledger`` which syncs torchft committed and which steps are replays (loop/ledger.py).

A replica group is ``ft.group_size`` processes (ranks; one per GPU in the cluster) that shard the model
(distributed/group.py). With fault tolerance on, groups find each other through the torchft Lighthouse; when one
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
from trainer.checkpoint.resume import Root, newest_verified
from trainer.config import Config
from trainer.distributed.group import Rank, checkpoint_group, join_group, leave_group
from trainer.ft.kube_events import FailureReporter
from trainer.ft.manager import FaultTolerance, fault_tolerance
from trainer.loop.ledger import Ledger
from trainer.loop.nonfinite import NonFiniteStop
from trainer.loop.progress import Progress, open_reports
from trainer.loop.trainer import Trainer
from trainer.observe.goodput import Goodput
from trainer.observe.runs import EventLog, high_water

log = logging.getLogger("trainer")


def train(cfg: Config, group: int, lighthouse: str) -> dict[str, Any]:
    """Train as replica group `group` until the run's last step commits; returns this group's report."""
    goodput = Goodput()
    started = goodput.clock()
    where = join_group(cfg, group)
    reports = open_reports(cfg, group, where.rank, goodput)
    events = reports.events
    ft = fault_tolerance(cfg, where, lighthouse)
    trainer = _trainer(cfg, group, ft, where)
    ft.register_state(trainer.state_dict, _healer(trainer, ft, events))
    checkpoints = _checkpointer(cfg, group, where, events, ft.inner_steps_per_commit)
    resumed = _resume(cfg, trainer, events)
    replays_up_to = high_water(cfg, group)
    with ft.running(trainer.fragments, trainer.inner, trainer.outer):
        progress = Progress(cfg, group, reports, goodput, ft, trainer.target)
        progress.started(started, where.rank, trainer.step, resumed)
        trainer.started(resumed)
        reporter = FailureReporter(os.environ)
        ledger = Ledger(trainer.step, replays_up_to, len(trainer.fragments), trainer.target)
        while trainer.step < trainer.target:
            progress.step_begins()
            result = trainer.train_step()
            if result is None:  # the run finished without this group (RL: the controller is done)
                break
            if result.nonfinite is not None:
                progress.nonfinite(result, trainer.guard.in_a_row)
                if isinstance(result.nonfinite, NonFiniteStop):
                    checkpoints.close()
                    ft.shutdown()
                    raise result.nonfinite
            progress.step_ends(result, trainer.step)
            if not result.synced:  # mid-period (DiLoCo), or a step that did not count
                continue
            sync = ledger.sync(trainer.step)
            failure = ft.failure()
            if not sync.committed and failure is not None and result.nonfinite is None:
                events.write("allreduce_failed", step=sync.step, error=failure)
                reporter.report(f"replica group {group}: collective failed at step {sync.step}: {failure}")
            progress.settle(sync)
            if not sync.committed:
                continue
            progress.committed(sync.step)
            trainer.after_commit(sync.step)
            ledger.record_fragment(sync.step, trainer.fragment_digest)
            progress.maybe_log(sync.step, result.loss)
            goodput.add("checkpoint", checkpoints.maybe_save(sync.step, trainer.state_dict))
    with goodput.timed("checkpoint"):
        checkpoints.wait()
    checkpoints.close()
    trainer.close()
    report = _report(group, trainer, ft, ledger, goodput)
    progress.finish(report)
    ft.shutdown()
    leave_group(where)
    return report


def _trainer(cfg: Config, group: int, ft: FaultTolerance, where: Rank) -> Trainer:
    if cfg.run.mode == "rl":
        from trainer.rl.policy import PolicyTrainer

        return PolicyTrainer(cfg, group, ft, where)
    return Trainer(cfg, group, ft, where)


def _healer(trainer: Trainer, ft: FaultTolerance, events: EventLog) -> Callable[[dict[str, Any]], None]:
    """What torchft calls with a live peer's state when this group heals."""

    def healed(state: dict[str, Any]) -> None:
        trainer.load_state_dict(state)
        events.write("healed", step=ft.current_step())

    return healed


def _checkpointer(cfg: Config, group: int, where: Rank, events: EventLog, inner_steps_per_commit: int) -> Checkpointer:
    """The group's checkpoints, saved every ``checkpoint.every`` inner steps (the loop saves at commits)."""
    return Checkpointer(
        f"{cfg.checkpoint.dir.rstrip('/')}/group-{group}",
        keep=cfg.checkpoint.keep,
        every=max(1, cfg.checkpoint.every // inner_steps_per_commit),
        on_event=lambda e: _checkpoint_event(events, e),
        process_group=checkpoint_group(where),  # each rank writes its own shards
    )


def _report(group: int, trainer: Trainer, ft: FaultTolerance, ledger: Ledger, goodput: Goodput) -> dict[str, Any]:
    """This group's final report (the ``final`` event and what ``train`` returns)."""
    return {
        "group": group,
        "step": trainer.step,
        "inner_steps": trainer.next_batch,
        "weights": trainer.weights_digest(),  # streaming DiLoCo: differs between groups by design (README)
        "fragments": ledger.fragments,
        "bytes_sent": ft.bytes_sent(),
        **ft.link_stats(),
        "loss": round(trainer.eval_loss(), 4),
        "goodput": goodput.report(),
    }


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
