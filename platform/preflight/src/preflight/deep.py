"""The deep checks' verdict as contract.health records: what Warden writes on the Node after a deep check.

`failures(report)` reads preflight's report (`preflight run --json`: `checks[]`), `of_report` the
failure it leaves for Warden (termination message, Node annotation: contract.health.Report), and
`read` either as text; each gives one health.Failure per problem: DCGM and RDMA-link checks list one problem an evidence line (a
per-GPU line starts "GPU <n>: "), every other check counts as one failure with its summary. A
check that could not run (status error) is a failure too ("could not run: ..."): a deep check
that did not happen must not read as a pass. Skipped checks are not failures.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from contract import health
from contract.problem import Invalid
from preflight import dcgm, multinode, rdma_links
from preflight.report import SCHEMA

CHECKS = (dcgm.NAME, multinode.NAME, rdma_links.NAME)  # what `preflight run --deep` adds
LINE_PER_FAILURE = (dcgm.NAME, rdma_links.NAME)
MAX_PER_CHECK = 16  # keeps a DeepCheck record well under health.MAX_BYTES
MAX_CHARS = 300
_GPU = re.compile(r"GPU (\d{1,4}): ")


def _cut(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_CHARS else flat[: MAX_CHARS - 3] + "..."


def _of_check(
    name: str, status: str, summary: str, evidence: list[str], gpu: int | None = None
) -> list[health.Failure]:
    if status == "error":
        return [health.Failure(check=name, gpu=None, evidence=_cut(f"could not run: {summary}"))]
    if name not in LINE_PER_FAILURE or not evidence:
        return [health.Failure(check=name, gpu=gpu, evidence=_cut(summary))]
    found = []
    for line in evidence[:MAX_PER_CHECK]:
        m = _GPU.match(line)
        found.append(health.Failure(check=name, gpu=int(m[1]) if m else None, evidence=_cut(line)))
    if len(evidence) > MAX_PER_CHECK:
        found.append(health.Failure(check=name, gpu=None, evidence=f"... {len(evidence) - MAX_PER_CHECK} more"))
    return found


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise Invalid([f"{where}: expected a string; is this preflight's report?"])
    return value


def _lines(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise Invalid([f"{where}: expected a list of strings; is this preflight's report?"])
    return value


def failures(report: Mapping[str, Any], where: str = "report") -> tuple[health.Failure, ...]:
    """Every failure in a preflight report (--json); contract.problem.Invalid (one line) otherwise."""
    if not isinstance(report, Mapping) or report.get("schema") != SCHEMA or "checks" not in report:
        raise Invalid([f"{where}: not a {SCHEMA} document; pass preflight's --json report or its failure record"])
    checks = report["checks"]
    if not isinstance(checks, list):
        raise Invalid([f"{where}.checks: expected a list; is this preflight's report?"])
    found: list[health.Failure] = []
    for i, entry in enumerate(checks):
        at = f"{where}.checks[{i}]"
        if not isinstance(entry, Mapping):
            raise Invalid([f"{at}: expected an object; is this preflight's report?"])
        status = _text(entry.get("status"), f"{at}.status")
        if status in ("fail", "error"):
            found += _of_check(
                _text(entry.get("name"), f"{at}.name"),
                status,
                _text(entry.get("summary"), f"{at}.summary"),
                _lines(entry.get("evidence", []), f"{at}.evidence"),
                _gpu(entry.get("gpu")),
            )
    return tuple(found)


def _gpu(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= health.MAX_GPU
    return value if ok else None


def of_report(report: health.Report) -> tuple[health.Failure, ...]:
    """The failures of preflight's failure record (decoded by contract.health.load_report)."""
    return tuple(_of_check(report.check, "fail", report.summary, list(report.evidence), report.gpu))


def read(text: str, where: str = "report") -> tuple[health.Failure, ...]:
    """failures() of a JSON text (the report printed by --json, or a termination message)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise Invalid([f"{where}: not JSON; pass preflight's --json report or its failure record"]) from None
    if isinstance(value, dict) and value.get("schema") == health.REPORT_SCHEMA:
        return of_report(health.load_report(text, where))
    return failures(value, where)
