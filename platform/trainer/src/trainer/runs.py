"""Reading a run's per-group event logs (<report_dir>/<run>/events-<group>.jsonl): for tests, benchmarks, reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_events(run_dir: Path, group: int) -> list[dict[str, Any]]:
    path = run_dir / f"events-{group}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def final_event(run_dir: Path, group: int) -> dict[str, Any] | None:
    finals = [e for e in read_events(run_dir, group) if e["event"] == "final"]
    return finals[-1] if finals else None
