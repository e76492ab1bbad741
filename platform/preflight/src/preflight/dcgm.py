"""DCGM diagnostics: `dcgmi diag -r <level> -j`, parsed into one preflight Result.

The JSON shape follows DCGM's own writer (NVIDIA/DCGM, dcgmi/Diag.cpp and
nvvs/include/NvvsJsonStrings.h; testing/python3/dcgm_diag_schema.json):

    {"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
        {"name": "memory", "results": [{"entity_group": "GPU", "entity_id": 3, "status": "Fail",
          "warnings": [{"warning": "...", "error_id": 83, ...}], "info": ["..."]}],
         "test_summary": {"status": "Fail"}}]}]}, "metadata": {"version": "4.x"}}

DCGM 3.x wrote the root as "DCGM GPU Diagnostic", a result's GPU as "gpu_id": "3" (a string),
a whole-node result as "gpu_ids": "0,1,2,3", and "info" as one string; both are read. Statuses
are Pass, Fail, Warn, Skip and Not Run (Diag::HelperDisplayDiagResult). When dcgmi cannot run
the diagnostic it writes {"<root>": {"runtime_error": "...", "version": "..."}}.

The parser is pure and total: any other input is a ParseError, which the check reports as one
failure ("unparseable dcgmi output"), never a pass and never a traceback.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

from preflight.report import Result

NAME = "dcgm-diag"
ROOTS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")  # DCGM 4.x, 3.x
# REFERENCE.md: level 1 takes seconds, level 2 about 2 minutes, level 3 about 15 (4 is longer still).
LEVELS = (1, 2, 3, 4)
TIMEOUT_S = {1: 300, 2: 900, 3: 2700, 4: 7200}  # about 3x the usual run time: a hung diag ends
EVIDENCE_CHARS = 300
STATUSES = {"pass": "pass", "fail": "fail", "warn": "warn", "skip": "skip", "skipped": "skip", "not run": "skip"}


class ParseError(ValueError):
    """The text is not a dcgmi diag JSON document."""


@dataclass(frozen=True)
class TestResult:
    category: str
    test: str
    gpu: int | None  # None: the result covers the node (software tests) or another entity
    status: str  # pass, fail, warn, skip; an unknown word reads as fail
    message: str  # the first warning (with its DCGM error id) or info line, on one line


@dataclass(frozen=True)
class Diagnostic:
    version: str
    runtime_error: str | None
    results: tuple[TestResult, ...]


def _one_line(text: str) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= EVIDENCE_CHARS else flat[: EVIDENCE_CHARS - 3] + "..."


def _document(text: str) -> dict[str, Any]:
    # dcgmi may print a warning line before the document (DCGM's own tests parse such output).
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise ParseError("no JSON object in the output")
    try:
        value = json.loads(text[start : end + 1])
    except (ValueError, RecursionError) as exc:
        raise ParseError(f"not JSON ({(str(exc).splitlines() or [type(exc).__name__])[0][:120]})") from None
    if not isinstance(value, dict):
        raise ParseError("the output is not a JSON object")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ParseError(f"{where} is not a list")
    return value


def _gpu(result: dict[str, Any]) -> int | None:
    if "entity_id" in result:  # DCGM 4.x: GPUs and other entities (CPU, NVSwitch...) by group
        entity = result["entity_id"]
        if result.get("entity_group", "GPU") != "GPU":
            return None
        if isinstance(entity, bool) or not isinstance(entity, int) or not 0 <= entity < 1024:
            raise ParseError(f"entity_id {str(entity)[:20]!r} is not a GPU index")
        return entity
    gpu = result.get("gpu_id")  # DCGM 3.x: a string; "gpu_ids" (several) means the whole node
    if gpu is None:
        return None
    text = str(gpu).strip()
    if not text.isdigit() or len(text) > 4:
        raise ParseError(f"gpu_id {text[:20]!r} is not a GPU index")
    return int(text)


def _message(result: dict[str, Any]) -> str:
    for warning in _list(result.get("warnings"), "warnings"):
        if isinstance(warning, dict):
            text = warning.get("warning") or warning.get("warnings") or ""
            code = warning.get("error_id")
            if text:
                return _one_line(f"{text} (DCGM error {code})" if isinstance(code, int) else str(text))
        elif isinstance(warning, str) and warning:
            return _one_line(warning)
    info = result.get("info")
    for line in [info] if isinstance(info, str) else _list(info, "info"):
        if isinstance(line, str) and line:
            return _one_line(line)
    return ""


def _status(result: dict[str, Any]) -> str:
    word = result.get("status")
    if not isinstance(word, str):
        raise ParseError("a result has no status")
    return STATUSES.get(word.strip().lower(), "fail")


def parse(text: str) -> Diagnostic:
    """The results in `dcgmi diag -j` output; ParseError for anything else."""
    document = _document(text)
    root = next((document[key] for key in ROOTS if key in document), None)
    if not isinstance(root, dict):
        raise ParseError(f"no {ROOTS[0]!r} object")
    metadata = document.get("metadata")
    version = root.get("version") or (metadata.get("version") if isinstance(metadata, dict) else None) or "unknown"
    error = root.get("runtime_error")
    if error is not None:
        return Diagnostic(_one_line(str(version)), _one_line(str(error)) or "unknown error", ())
    results = []
    for category in _list(root.get("test_categories"), "test_categories"):
        if not isinstance(category, dict):
            raise ParseError("a test category is not an object")
        for test in _list(category.get("tests"), "tests"):
            if test is None:  # DCGM leaves null holes in the array for tests it did not run
                continue
            if not isinstance(test, dict) or not isinstance(test.get("name"), str):
                raise ParseError("a test has no name")
            entries = _list(test.get("results"), "results")
            summary = test.get("test_summary")
            if isinstance(summary, dict) and (not entries or summary.get("status") in ("Fail", "FAIL")):
                entries = [*entries, summary]  # the test as a whole: an error tied to no GPU shows only here
            found = []
            for entry in entries:
                if not isinstance(entry, dict):
                    raise ParseError(f"a result of {test['name']!r} is not an object")
                found.append(
                    TestResult(
                        _one_line(str(category.get("category", "?"))),
                        _one_line(test["name"]),
                        _gpu(entry),
                        _status(entry),
                        _message(entry),
                    )
                )
            if entries and entries[-1] is summary and len(found) > 1 and any(r.status == "fail" for r in found[:-1]):
                found.pop()  # the summary repeats a failure already reported per GPU
            results += found
    if not results:
        raise ParseError("no test results")
    return Diagnostic(_one_line(str(version)), None, tuple(results))


def evidence(result: TestResult) -> str:
    """One line; a per-GPU line starts with "GPU <index>: " (deep.failures reads the index back)."""
    where = f"GPU {result.gpu}: " if result.gpu is not None else ""
    detail = f": {result.message}" if result.message else ""
    return f"{where}{result.test} ({result.category}) {result.status}{detail}"


def check(text: str, level: int) -> Result:
    """Judge dcgmi's output: any failing result fails the check; warnings pass, counted."""
    try:
        diag = parse(text)
    except ParseError as exc:
        return Result(NAME, "fail", f"unparseable dcgmi output: {exc}")
    if diag.runtime_error is not None:
        return Result(NAME, "error", f"dcgmi could not run the level {level} diagnostic: {diag.runtime_error}")
    failed = [r for r in diag.results if r.status == "fail"]
    warned = [r for r in diag.results if r.status == "warn"]
    ran = sum(r.status != "skip" for r in diag.results)
    note = f", {len(warned)} warning(s)" if warned else ""
    if failed:
        first = failed[0]
        on = f" on GPU {first.gpu}" if first.gpu is not None else ""
        more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
        return Result(
            NAME,
            "fail",
            f"level {level}: {first.test} failed{on}{more}{note}",
            [evidence(r) for r in failed],  # failures only: deep.failures maps each line to one
            first.gpu,
        )
    return Result(
        NAME,
        "pass",
        f"level {level}: {ran} test result(s) passed{note} (DCGM {diag.version})",
        [evidence(r) for r in warned],
    )


def command(level: int, host: str | None) -> list[str]:
    return ["dcgmi", "diag", "-r", str(level), "-j", *(["--host", host] if host else [])]


def run(level: int, host: str | None = None, timeout_s: float | None = None) -> Result:
    """Run dcgmi on this node. No dcgmi: skipped, with why. A hung diagnostic ends at the timeout."""
    if shutil.which("dcgmi") is None:
        return Result(
            NAME,
            "skip",
            "dcgmi is not on PATH: this image has no DCGM client (the diagnostics need dcgmi and a reachable "
            "nv-hostengine; --dcgm-host HOST names one)",
        )
    limit = timeout_s if timeout_s is not None else TIMEOUT_S[level]
    try:
        done = subprocess.run(command(level, host), capture_output=True, text=True, timeout=limit, check=False)
    except subprocess.TimeoutExpired:  # dcgmi is killed; a diagnostic nv-hostengine already runs ends on its own
        return Result(NAME, "error", f"dcgmi diag -r {level} did not finish within {limit:g} s")
    except OSError as exc:
        return Result(NAME, "error", f"cannot run dcgmi ({exc})")
    # dcgmi exits non-zero when a test fails; the JSON on stdout still says which.
    if not done.stdout.strip():
        reason = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[0]
        return Result(NAME, "error", f"dcgmi diag -r {level} printed nothing: {_one_line(reason)}")
    return check(done.stdout, level)
