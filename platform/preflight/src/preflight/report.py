"""The preflight report: versioned JSON for machines, one line per check for people."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from contract import names

SCHEMA = names.PREFLIGHT_REPORT_SCHEMA  # the report, and the failure Warden reads (annotation, termination message)
Status = Literal["pass", "fail", "error", "skip"]


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


EVIDENCE_LINES = 20  # per failing check on the terminal; --json always has all of it


def lines(results: list[Result], limit: int = EVIDENCE_LINES) -> str:
    """One line per check; a failing or erroring check's evidence below it (the first `limit` lines, then a count)."""
    out = []
    for r in results:
        out.append(f"{r.status.upper():5} {r.name}: {r.summary}\n")
        if r.status in ("fail", "error"):
            out += [f"      {row}\n" for row in r.evidence[:limit]]
            if len(r.evidence) > limit:
                out.append(f"      ... {len(r.evidence) - limit} more evidence lines; --json prints all of them\n")
    return "".join(out)


TERMINATION_LIMIT = 4096  # bytes of a termination message the kubelet keeps


def failure(results: list[Result], time: str, max_evidence: int = 5) -> dict[str, Any] | None:
    """The first failing check as Warden reads it (annotation or termination message); None when none failed."""
    failed = next((r for r in results if r.status == "fail"), None)
    if failed is None:
        return None
    return {
        "schema": SCHEMA,
        "check": failed.name,
        "summary": failed.summary,
        "evidence": failed.evidence[:max_evidence],
        "time": time,
    }


def termination_message(results: list[Result], time: str) -> str | None:
    """The failure as one JSON line within the kubelet's limit: evidence goes first, then the summary is cut."""
    value = failure(results, time)
    if value is None:
        return None
    text = json.dumps(value, sort_keys=True)
    while len(text.encode()) > TERMINATION_LIMIT and value["evidence"]:
        value["evidence"] = value["evidence"][:-1]
        text = json.dumps(value, sort_keys=True)
    if len(text.encode()) > TERMINATION_LIMIT:
        value["summary"] = value["summary"][:1024]
        text = json.dumps(value, sort_keys=True)
    return text


def node_annotation(results: list[Result], time: str, max_evidence: int = 5) -> dict[str, str] | None:
    """The annotation for the first failing check, or None when nothing failed."""
    value = failure(results, time, max_evidence)
    return None if value is None else {names.PREFLIGHT_FAILURE_ANNOTATION: json.dumps(value, sort_keys=True)}
