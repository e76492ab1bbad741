"""What a researcher sees: one line per logging window and the run's outcome; everything else goes to files.

Each replica-group process writes its output (torchft's Rust and Python logs, warnings, tracebacks)
to ``<run dir>/group-<g>.log``; the Lighthouse, which runs in the launcher and logs from Rust straight
to file descriptor 2, writes to ``<run dir>/lighthouse.log`` (``native_stderr_to``). The console is
made from the groups' event logs instead: a line when a logging window closes (step, loss, tokens/s,
MFU, participants, goodput so far, and why it dipped when a restarted group rejoined), DiLoCo's inner
steps between its outer ones, a group that resumes, heals, is restarted or stops, and the outcome with
the goodput at the end.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from trainer.config import MAX_RESTARTS
from trainer.model.flops import format_mfu
from trainer.rl.report import generators_line, trainer_line


def group_log(out: Path, group: int) -> Path:
    return out / f"group-{group}.log"


@contextmanager
def native_stderr_to(path: Path) -> Iterator[None]:
    """Send what native code (torchft's Rust, C++ warnings) writes to fd 2 into ``path``; Python's own
    ``sys.stderr`` (launcher warnings, tracebacks) stays on the console."""
    sys.stderr.flush()
    console = os.dup(2)
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    previous = sys.stderr
    try:
        os.dup2(log, 2)
        sys.stderr = open(os.dup(console), "w", buffering=1, closefd=True)  # noqa: SIM115 (closed below)
        yield
    finally:
        sys.stderr.flush()
        sys.stderr.close()
        sys.stderr = previous
        os.dup2(console, 2)
        os.close(console)
        os.close(log)


class Console:
    """Follows ``events-*.jsonl`` under ``out`` from their current ends (an earlier run's lines are not
    this run's) and prints a line per logged step, combined over the groups that logged it.

    ``target``: the committed step the run ends at; ``inner_per_step``: inner steps per committed step
    (DiLoCo's sync period; 1 for DDP), so DiLoCo's lines say both the inner and the outer step.
    """

    def __init__(self, out: Path, target: int, stream: TextIO | None = None, inner_per_step: int = 1) -> None:
        self.out, self.target, self.stream, self.per = out, target, stream or sys.stdout, inner_per_step
        self.offsets = {p: p.stat().st_size for p in out.glob("events-*.jsonl")}
        self.printed: set[int] = set()
        self.printed_inner: set[int] = set()
        self.last_goodput: float | None = None
        self.recovering: set[int] = set()  # restarted groups whose first logging window is still to come

    def _new_events(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for path in sorted(self.out.glob("events-*.jsonl")):
            events, self.offsets[path] = read_new(path, self.offsets.get(path, 0))
            group = path.stem.removeprefix("events-")
            found += [{"group": int(group), **e} if group.isdigit() else e for e in events]
        return found

    def poll(self) -> None:
        self.show(self._new_events())

    def show(self, events: list[dict[str, Any]]) -> None:
        """Print the lines these events make (from the files here, or sent by Ray's groups: launch/ray_supervisor.py).

        Each event carries its replica group (``group``: from its file's name, or added by the supervisor).
        """
        steps: dict[int, list[dict[str, Any]]] = {}
        inner: dict[int, list[dict[str, Any]]] = {}
        lines: list[str] = []  # after the steps: a group stops after the last step it logged
        for event in events:
            kind, group = event.get("event"), event.get("group")
            if kind == "step" and isinstance(event.get("step"), int):
                steps.setdefault(event["step"], []).append(event)
            elif kind == "inner" and isinstance(event.get("inner_step"), int):
                inner.setdefault(event["inner_step"], []).append(event)
            elif kind == "stopped":
                lines.append(f"replica group {group}: {event.get('reason')}")
            elif kind == "resumed":
                where = f"{event.get('dir')}, group {event.get('from_group')}"
                self.print(f"replica group {group}: resumed from checkpoint step {event.get('step')} ({where})")
            elif kind == "healed":
                self.print(f"replica group {group}: healed from a live group at step {event.get('step')}")
        for number in sorted(set(inner) - self.printed_inner):
            self.printed_inner.add(number)
            self.print(self.inner_line(number, inner[number]))
        for step in sorted(set(steps) - self.printed):
            self.printed.add(step)
            self.print(self.step_line(step, steps[step]))
        for line in lines:
            self.print(line)

    def restarted(self, group: int, why: str, delay_s: float, restarts: int, limit: int = MAX_RESTARTS) -> None:
        """A launcher restarts ``group``: say so, and explain the goodput dip when it rejoins."""
        self.recovering.add(group)
        self.print(f"replica group {group}: {why}; restarting it in {delay_s:g} s (restart {restarts} of {limit})")

    def _counter(self, step: int) -> str:
        if self.per == 1:
            return f"step {step}/{self.target}"
        return f"outer step {step}/{self.target} (inner step {step * self.per}/{self.target * self.per})"

    def inner_line(self, inner_step: int, reports: list[dict[str, Any]]) -> str:
        """DiLoCo between syncs: an inner step's loss, with the outer step it belongs to."""
        loss = _mean(reports, "loss")
        outer = max((r.get("step") or 0 for r in reports), default=0) + 1
        return (
            f"inner step {inner_step}/{self.target * self.per}  outer step {outer}/{self.target}  "
            f"loss {'n/a' if loss is None else f'{loss:.4f}'}"
        )

    def step_line(self, step: int, reports: list[dict[str, Any]]) -> str:
        loss, mfu, goodput = _mean(reports, "loss"), _mean(reports, "mfu"), _mean(reports, "goodput")
        rate = sum(r.get("tokens_per_s") or 0 for r in reports)
        participants = max((r.get("participants") or 0 for r in reports), default=0)
        line = (
            f"{self._counter(step)}  loss {'n/a' if loss is None else f'{loss:.4f}'}  tokens/s {rate:,.0f}  "
            f"MFU {format_mfu(mfu)}  participants {participants}  "
            f"goodput {'n/a' if goodput is None else f'{goodput:.1%}'}"
        )
        back = sorted(self.recovering & {r.get("group") for r in reports})
        self.recovering -= set(back)
        if back and goodput is not None and self.last_goodput is not None and goodput < self.last_goodput:
            # A restarted group's goodput starts over, with its start-up and healing in it: the mean dips.
            names = ", ".join(map(str, back))
            line += f"  (group {names} restarted: its start-up and recovery count against goodput)"
        self.last_goodput = goodput if goodput is not None else self.last_goodput
        return line

    def print(self, line: str) -> None:
        print(line, file=self.stream, flush=True)


def _mean(reports: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in reports if isinstance(r.get(key), (int, float))]
    return sum(values) / len(values) if values else None


def read_new(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The complete event lines of ``path`` after ``offset``, and the offset after them."""
    if not path.exists():
        return [], offset
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read()
    complete = data[: data.rfind(b"\n") + 1]  # a line being written is read next time
    found = []
    for line in complete.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a torn line from a killed process
        if isinstance(event, dict):
            found.append(event)
    return found, offset + len(complete)


def outcome_line(run: str, outcome: str, summary: dict[str, Any], out: Path) -> str:
    """The final report: completed / stopped: why / failed: why, and the goodput of this run's groups only.

    An RL run's summary also holds its trainer's split of step time (training against waiting for batches) and
    its generators' time (``trainer.rl.report``), shown after.
    """
    reports = summary.get("replica_group_reports", 0)
    goodput = (
        f"goodput {run}: {summary['goodput']:.1%} over {reports} replica group report(s)"
        if reports
        else f"goodput {run}: n/a (no replica group finished)"
    )
    if "trainer" in summary:
        goodput += f"; {trainer_line(summary['trainer'])}"
    if "generators" in summary:
        goodput += f"; {generators_line(summary['generators'])}"
    return f"run {run} {outcome}; {goodput}; logs in {out}"
