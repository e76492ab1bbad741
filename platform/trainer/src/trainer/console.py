"""What a researcher sees: one line per logging window and the run's outcome; everything else goes to files.

Each replica-group process writes its output (torchft's Rust and Python logs, warnings, tracebacks)
to ``<run dir>/group-<g>.log``; the Lighthouse, which runs in the launcher and logs from Rust straight
to file descriptor 2, writes to ``<run dir>/lighthouse.log`` (``native_stderr_to``). The console is
made from the groups' event logs instead: a line when a logging window closes (step, loss, tokens/s,
MFU, participants, goodput so far), a group that stops, and the outcome with the goodput at the end.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from trainer.flops import format_mfu
from trainer.rl.report import generators_line


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
    this run's) and prints a line per logged step, combined over the groups that logged it."""

    def __init__(self, out: Path, target: int, stream: TextIO | None = None) -> None:
        self.out, self.target, self.stream = out, target, stream or sys.stdout
        self.offsets = {p: p.stat().st_size for p in out.glob("events-*.jsonl")}
        self.printed: set[int] = set()
        self.last_goodput: float | None = None

    def _new_events(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for path in sorted(self.out.glob("events-*.jsonl")):
            events, self.offsets[path] = read_new(path, self.offsets.get(path, 0))
            found += events
        return found

    def poll(self) -> None:
        self.show(self._new_events())

    def show(self, events: list[dict[str, Any]]) -> None:
        """Print the lines these events make (from the files here, or sent by Ray's groups: ray_supervisor.py)."""
        steps: dict[int, list[dict[str, Any]]] = {}
        stops: list[str] = []  # after the steps: a group stops after the last step it logged
        for event in events:
            if event.get("event") == "step" and isinstance(event.get("step"), int):
                steps.setdefault(event["step"], []).append(event)
            elif event.get("event") == "stopped":
                stops.append(f"replica group {event.get('group')}: {event.get('reason')}")
        for step in sorted(steps):
            if step not in self.printed:
                self.printed.add(step)
                self.print(self.step_line(step, steps[step]))
        for line in stops:
            self.print(line)

    def step_line(self, step: int, reports: list[dict[str, Any]]) -> str:
        def mean(key: str) -> float | None:
            values = [r[key] for r in reports if isinstance(r.get(key), (int, float))]
            return sum(values) / len(values) if values else None

        loss, mfu, goodput = mean("loss"), mean("mfu"), mean("goodput")
        rate = sum(r.get("tokens_per_s") or 0 for r in reports)
        self.last_goodput = goodput if goodput is not None else self.last_goodput
        participants = max((r.get("participants") or 0 for r in reports), default=0)
        return (
            f"step {step}/{self.target}  loss {'n/a' if loss is None else f'{loss:.4f}'}  tokens/s {rate:,.0f}  "
            f"MFU {format_mfu(mfu)}  participants {participants}  "
            f"goodput {'n/a' if goodput is None else f'{goodput:.1%}'}"
        )

    def print(self, line: str) -> None:
        print(line, file=self.stream, flush=True)


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

    An RL run's summary also holds its generators' time (``trainer.rl.report.with_generators``), shown after.
    """
    reports = summary.get("replica_group_reports", 0)
    goodput = (
        f"goodput {run}: {summary['goodput']:.1%} over {reports} replica group report(s)"
        if reports
        else f"goodput {run}: n/a (no replica group finished)"
    )
    if "generators" in summary:
        goodput += f"; {generators_line(summary['generators'])}"
    return f"run {run} {outcome}; {goodput}; logs in {out}"
