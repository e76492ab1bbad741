"""The preflight report: versioned JSON for machines, one line per check for people."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

SCHEMA = "meridian.preflight/v1"
Status = Literal["pass", "fail", "error", "skip"]

# The Node annotation Warden reads when a check fails (issue 8).
ANNOTATION = "meridian.dev/preflight-failure"


@dataclass(frozen=True)
class Result:
    name: str
    status: Status
    summary: str
    evidence: list[str] = field(default_factory=list)


def exit_code(results: list[Result]) -> int:
    """0 all passed (or skipped), 1 a check failed, 2 a check could not run."""
    if any(r.status == "fail" for r in results):
        return 1
    if any(r.status == "error" for r in results):
        return 2
    return 0


def as_json(results: list[Result], node: str, time: str) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "node": node,
        "time": time,
        "passed": exit_code(results) == 0,
        "checks": [asdict(r) for r in results],
    }


def lines(results: list[Result]) -> str:
    return "".join(f"{r.status.upper():5} {r.name}: {r.summary}\n" for r in results)


def node_annotation(results: list[Result], time: str, max_evidence: int = 5) -> dict[str, str] | None:
    """The annotation for the first failing check, or None when nothing failed."""
    failed = next((r for r in results if r.status == "fail"), None)
    if failed is None:
        return None
    value = {
        "schema": SCHEMA,
        "check": failed.name,
        "summary": failed.summary,
        "evidence": failed.evidence[:max_evidence],
        "time": time,
    }
    return {ANNOTATION: json.dumps(value, sort_keys=True)}
