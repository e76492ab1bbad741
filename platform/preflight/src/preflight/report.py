"""The preflight report: versioned JSON for machines, one line per check for people.

The first failing check, for Warden and gkr (termination message, Node annotation), is the
node-health contract's Report, written only by its encoder (contract.health.dump_report).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from contract import health, names

SCHEMA = names.PREFLIGHT_REPORT_SCHEMA  # the whole report (--json)
Status = Literal["pass", "fail", "error", "skip"]


@dataclass(frozen=True)
class Result:
    name: str
    status: Status
    summary: str
    evidence: list[str] = field(default_factory=list)
    gpu: int | None = None  # the (first) failing GPU's index, where the check knows it


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


TERMINATION_LIMIT = health.REPORT_MAX_BYTES  # bytes of a termination message the kubelet keeps


def failure(results: list[Result], at: float, max_evidence: int = 5) -> health.Report | None:
    """The first failing check as Warden and gkr read it (annotation or termination message); None when none failed."""
    failed = next((r for r in results if r.status == "fail"), None)
    if failed is None:
        return None
    return health.Report(
        check=failed.name,
        summary=failed.summary,
        time=at,
        gpu=failed.gpu,
        evidence=tuple(failed.evidence[:max_evidence]),
    )


def termination_message(results: list[Result], at: float) -> str | None:
    """The failure as one JSON line within the kubelet's limit (the encoder drops evidence, then cuts the summary)."""
    value = failure(results, at)
    return None if value is None else health.dump_report(value, TERMINATION_LIMIT)


def node_annotation(results: list[Result], at: float, max_evidence: int = 5) -> dict[str, str] | None:
    """The annotation for the first failing check, or None when nothing failed."""
    value = failure(results, at, max_evidence)
    return None if value is None else {names.PREFLIGHT_FAILURE_ANNOTATION: health.dump_report(value)}
