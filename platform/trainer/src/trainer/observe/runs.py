"""A run's reports under <report_dir>/<run>/: per-group event logs and progress, for tests, benchmarks, reports.

``events-<group>.jsonl`` has one JSON line per event (steps with their participants, heals,
checkpoints, failures, the final report); ``progress-<group>.json`` the highest step a group ever
logged, which tells replayed steps from new ones after a resume.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainer.config import Config


def run_dir(cfg: Config) -> Path:
    return Path(cfg.run.report_dir) / cfg.run.name


def inner_per_commit(cfg: Config) -> int:
    """Inner steps per committed step: a DiLoCo step is a sync (sync_every / fragments inner steps); DDP's is one."""
    return cfg.optim.sync_every // cfg.optim.fragments if cfg.optim.algorithm == "diloco" else 1


def committed_target(cfg: Config) -> int:
    """The committed step the run ends at."""
    return -(-cfg.run.steps // inner_per_commit(cfg))


class EventLog:
    """Appends one group's events; line-buffered, so a group that is killed loses at most its last line."""

    def __init__(self, path: Path, observe: Callable[[str, dict[str, Any]], None] | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = path.open("a", buffering=1)
        self.observe = observe  # the live metrics (trainer.observe.metrics), updated from the same events

    def write(self, event: str, **fields: Any) -> None:
        self.file.write(json.dumps({"event": event, "time": time.time(), **fields}) + "\n")
        if self.observe is not None:
            self.observe(event, fields)


def read_events(run_dir: Path, group: int) -> list[dict[str, Any]]:
    path = run_dir / f"events-{group}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def final_event(run_dir: Path, group: int) -> dict[str, Any] | None:
    finals = [e for e in read_events(run_dir, group) if e["event"] == "final"]
    return finals[-1] if finals else None


def final_reports(out: Path, since: float = 0.0) -> list[dict[str, Any]]:
    """The goodput reports of every replica-group process that finished, from their event logs.

    ``since``: only those written at or after this time (the launch's start): event logs are appended
    to by every run of the same name, and a run that failed must not report an earlier run's goodput.
    """
    groups = sorted(int(p.stem.split("-", 1)[1]) for p in out.glob("events-*.jsonl"))
    return [e["goodput"] for g in groups for e in read_events(out, g) if e["event"] == "final" and e["time"] >= since]


def high_water(cfg: Config, group: int) -> int:
    """The highest step this group ever logged (-1: none): steps up to it are replays after a resume."""
    path = run_dir(cfg) / f"progress-{group}.json"
    return int(json.loads(path.read_text())["step"]) if path.exists() else -1


def raise_high_water(cfg: Config, group: int, step: int) -> None:
    if step > high_water(cfg, group):
        path = run_dir(cfg) / f"progress-{group}.json"
        # Written beside and renamed: a group killed mid-write (every step writes) left an empty file that its
        # restarts then failed to read, until the run gave up on the group.
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(json.dumps({"step": step}))
        os.replace(partial, path)
