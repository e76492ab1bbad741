"""One replica group's progress as the world sees it: goodput accounting, the logging cadence, its events.

The training loop tells ``Progress`` what happened (an inner step taken or skipped, a sync's verdict, a
commit) and it decides what each second was worth (observe/goodput.py's buckets: an inner step's time waits for
the sync that decides its fate) and when a logging window closes (every ``run.log_every`` committed
steps and at the last; under DiLoCo, log_every counts inner steps, and the inner steps between syncs
are logged too). Everything it says goes through the group's event log, which also feeds the
live metrics (observe/metrics.py), so the events file, /metrics and W&B tell one story.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import NamedTuple

from trainer.config import Config
from trainer.ft.manager import FaultTolerance
from trainer.loop.ledger import Sync
from trainer.loop.trainer import Step
from trainer.model.flops import Window, flops_per_token
from trainer.observe.goodput import Goodput
from trainer.observe.metrics import RunMetrics, observer
from trainer.observe.metrics import start as start_metrics
from trainer.observe.runs import EventLog, raise_high_water, run_dir

log = logging.getLogger("trainer")


class Reports(NamedTuple):
    """Where one rank's account of its group goes."""

    events: EventLog
    live: RunMetrics | None  # rank 0 of the group (its lead) only


def open_reports(cfg: Config, group: int, rank: int, goodput: Goodput) -> Reports:
    """This rank's event log and, on rank 0 (which writes the group's events and reports), the live metrics."""
    lead = rank == 0
    live = start_metrics(cfg, group, goodput, run_dir(cfg)) if lead else None
    name = f"events-{group}.jsonl" if lead else f"ranks/events-{group}-{rank}.jsonl"
    return Reports(EventLog(run_dir(cfg) / name, observer(live)), live)


def throughput_window(cfg: Config, inner_steps_per_commit: int, clock: Callable[[], float]) -> Window:
    """tokens/s and MFU of this group per logging window (model/flops.py)."""
    return Window(
        tokens_per_step=inner_steps_per_commit * cfg.data.batch_size * cfg.model.seq_len,
        flops_per_token=flops_per_token(cfg.model),
        gpus=int(getattr(cfg.ft, "group_size", 1)),  # the group's GPUs (one rank each)
        peak_tflops=cfg.perf.peak_tflops,
        clock=clock,
    )


class Progress:
    """Goodput and logging of one rank of a group, whose run ends at committed step ``target``.

    ``reports``: ``open_reports``'s (live metrics on the group's lead rank only).
    """

    def __init__(
        self, cfg: Config, group: int, reports: Reports, goodput: Goodput, ft: FaultTolerance, target: int
    ) -> None:
        self.cfg, self.group, self.goodput, self.ft, self.target = cfg, group, goodput, ft, target
        self.events, self.live = reports
        self.lead = self.live is not None  # writes the group's events and reports
        self.window = throughput_window(cfg, ft.inner_steps_per_commit, goodput.clock)
        self.pending: list[float] = []  # inner steps whose fate the next sync decides
        self.began = 0.0

    def started(self, since: float, rank: int, step: int, resumed: int | None) -> None:
        """Book everything since ``since`` as start-up; the first logging window opens at committed ``step``."""
        self.goodput.add("startup", self.goodput.clock() - since)
        self.events.write("started", group=self.group, rank=rank, pid=os.getpid(), step=step, resumed=resumed)
        self.window.start(step)

    def step_begins(self) -> None:
        self.began = self.goodput.clock()

    def nonfinite(self, result: Step, in_a_row: int) -> None:
        self.events.write("nonfinite", step=result.inner_step, in_a_row=in_a_row, error=str(result.nonfinite))
        log.warning("replica group %d: %s", self.group, result.nonfinite)

    def step_ends(self, result: Step, outer: int) -> None:
        """An inner step that counts waits for its sync's verdict; one that does not (DiLoCo skipped it) was lost.

        Between DiLoCo's syncs (committed step ``outer`` so far) every ``run.log_every``-th inner step writes an
        ``inner`` event with its loss: the console's inner lines, so a long sync period is not silent.
        """
        seconds = self.goodput.clock() - self.began
        if result.counted:
            self.pending.append(seconds)
        else:
            self.goodput.step(seconds, False, replayed=False)
        between = self.ft.inner_steps_per_commit > 1 and result.counted and not result.synced
        if between and result.nonfinite is None and result.inner_step % self.cfg.run.log_every == 0:
            self.events.write("inner", step=outer, inner_step=result.inner_step, loss=round(result.loss, 4))

    def settle(self, sync: Sync) -> None:
        """Book the sync period's inner steps by its verdict."""
        for seconds in self.pending:
            self.goodput.step(seconds, sync.committed, replayed=sync.replayed)
        self.pending = []

    def committed(self, step: int) -> None:
        # Every committed step, with who took part: what the fault tests assert on.
        self.events.write("commit", step=step, participants=self.ft.num_participants())

    def should_log(self, step: int) -> bool:
        """At the last step, and when the inner steps up to ``step`` reach a multiple of ``run.log_every``
        (DDP: every log_every-th step; DiLoCo: an outer step whose period holds such an inner step)."""
        per, every = self.ft.inner_steps_per_commit, self.cfg.run.log_every
        return (step * per) // every != (step * per - per) // every or step == self.target

    def maybe_log(self, step: int, loss: float) -> None:
        """Close the logging window at committed ``step`` when the cadence says so."""
        if not self.should_log(step):
            return
        ft = self.ft
        self.events.write(
            "step", step=step, loss=round(loss, 4), participants=ft.num_participants(), bytes=ft.bytes_sent(),
            goodput=round(self.goodput.goodput, 4), **self.window.close(step), **ft.link_stats(),
        )  # fmt: skip
        if self.lead:  # the group's high-water mark, which tells replays after a resume (loop/ledger.py)
            raise_high_water(self.cfg, self.group, step)

    def finish(self, report: dict[str, object]) -> None:
        """The final event; on the lead rank the final metrics and the goodput line."""
        self.events.write("final", **report)
        if self.live is not None:  # the lead: final metrics as Prometheus text, for a textfile collector or a push
            self.live.finish(run_dir(self.cfg) / f"goodput-{self.group}.prom")
            log.info(self.goodput.line(f"{self.cfg.run.name}/group-{self.group}"))
