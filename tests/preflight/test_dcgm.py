"""DCGM diagnostics: the parser on outputs built from DCGM's documented JSON, and the runner without dcgmi."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from preflight import dcgm

FIXTURES = Path(__file__).parent / "fixtures" / "dcgm"


def _text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8", errors="replace")


def test_a_passing_run() -> None:
    result = dcgm.check(_text("pass.json"), 2)
    assert result.status == "pass"
    assert result.summary == "level 2: 17 test result(s) passed (DCGM 4.6.0)"
    assert result.evidence == []


def test_a_failing_gpu_memory_test_names_the_test_the_gpu_and_the_evidence() -> None:
    result = dcgm.check(_text("memory-fail.json"), 3)
    assert result.status == "fail"
    assert result.summary == "level 3: memory failed on GPU 3"
    assert result.evidence == [
        "GPU 3: memory (Hardware) fail: Found 12 faulty memory elements on GPU 3 (DCGM error 52)"
    ]


def test_a_pcie_failure_and_a_warning() -> None:
    result = dcgm.check(_text("pcie-fail.json"), 2)
    assert result.status == "fail"
    assert result.summary == "level 2: pcie failed on GPU 5, 1 warning(s)"
    assert len(result.evidence) == 1  # failures only; the warning is counted in the summary
    assert result.evidence[0].startswith("GPU 5: pcie (Integration) fail: GPU 5 is running at PCI link width 8X")
    assert result.evidence[0].endswith("(DCGM error 46)")


def test_the_dcgm_3_shape() -> None:
    diag = dcgm.parse(_text("v3-memory-fail.json"))
    assert diag.version == "3.3.9"
    assert [(r.test, r.gpu, r.status) for r in diag.results] == [
        ("Denylist", None, "pass"),
        ("GPU Memory", 0, "pass"),
        ("GPU Memory", 1, "fail"),
    ]
    assert dcgm.check(_text("v3-memory-fail.json"), 2).summary == "level 2: GPU Memory failed on GPU 1"


@pytest.mark.parametrize("name", ["truncated.json", "garbled.txt"])
def test_garbled_or_truncated_output_is_one_clear_failure(name: str) -> None:
    result = dcgm.check(_text(name), 2)
    assert result.status == "fail"
    assert result.summary.startswith("unparseable dcgmi output: ")
    assert "\n" not in result.summary


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[]",
        "{}",
        '{"DCGM Diagnostic": []}',
        '{"DCGM Diagnostic": {"test_categories": {}}}',
        '{"DCGM Diagnostic": {"test_categories": []}}',
        '{"DCGM Diagnostic": {"test_categories": [{"tests": [{"name": 5}]}]}}',
        '{"DCGM Diagnostic": {"test_categories": [{"tests": [{"name": "m", "results": [{"entity_id": -1, "status": "Pass"}]}]}]}}',
        '{"DCGM Diagnostic": {"test_categories": [{"tests": [{"name": "m", "results": [{"gpu_id": "1e9", "status": "Pass"}]}]}]}}',
        '{"DCGM Diagnostic": {"test_categories": [{"tests": [{"name": "m", "results": [{"gpu_id": "0"}]}]}]}}',
        "[" * 100_000 + "]" * 100_000,
        '{"DCGM Diagnostic": ' * 50_000,
    ],
)
def test_hostile_documents_never_pass_and_never_raise(text: str) -> None:
    result = dcgm.check(text, 2)
    assert result.status == "fail"
    assert result.summary.startswith("unparseable dcgmi output")


def _memory_test(*results: dict[str, Any]) -> str:
    """`dcgmi diag -j` output, DCGM 4's shape, holding one Hardware test, memory, with these results."""
    tests = [{"name": "memory", "results": list(results)}]
    return json.dumps({"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": tests}]}})


def test_an_unknown_status_word_reads_as_a_failure() -> None:
    text = _memory_test({"entity_group": "GPU", "entity_id": 2, "status": "Kaput"})
    result = dcgm.check(text, 2)
    assert (result.status, result.evidence) == ("fail", ["GPU 2: memory (Hardware) fail"])


def test_a_long_warning_stays_one_short_line() -> None:
    text = _memory_test({"entity_id": 0, "status": "Fail", "warnings": [{"warning": "bad\n" * 10_000}]})
    (line,) = dcgm.check(text, 2).evidence
    assert "\n" not in line
    assert len(line) < 400


def test_a_runtime_error_is_an_error_not_a_pass() -> None:
    result = dcgm.check(_text("runtime-error.json"), 2)
    assert result.status == "error"
    assert "unable to establish a connection" in result.summary


def test_no_dcgmi_is_skipped_with_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    result = dcgm.run(2)
    assert result.status == "skip"
    assert "dcgmi is not on PATH" in result.summary


def _fake_dcgmi(folder: Path, script: str) -> None:
    path = folder / "dcgmi"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_dcgmi_exits_non_zero_on_a_failure_and_its_json_still_counts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fake_dcgmi(tmp_path, f'[ "$*" = "diag -r 3 -j" ] || exit 9\ncat {FIXTURES / "memory-fail.json"}\nexit 226\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    result = dcgm.run(3)
    assert (result.status, result.summary) == ("fail", "level 3: memory failed on GPU 3")


def test_a_hung_dcgmi_ends_at_the_timeout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _fake_dcgmi(tmp_path, "exec sleep 30\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    result = dcgm.run(1, timeout_s=0.5)
    assert (result.status, result.summary) == ("error", "dcgmi diag -r 1 did not finish within 0.5 s")


def test_dcgmi_that_prints_nothing_is_an_error_with_its_reason(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _fake_dcgmi(tmp_path, "echo 'Error: host engine not running' >&2\nexit 1\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    result = dcgm.run(2, host="10.0.0.9")
    assert (result.status, result.summary) == (
        "error",
        "dcgmi diag -r 2 printed nothing: Error: host engine not running",
    )
    assert dcgm.command(2, "10.0.0.9") == ["dcgmi", "diag", "-r", "2", "-j", "--host", "10.0.0.9"]


def test_a_failure_tied_to_no_gpu_shows_in_the_test_summary_only() -> None:
    per_gpu = [{"entity_group": "GPU", "entity_id": g, "status": "Pass"} for g in range(2)]
    summary = {"status": "Fail", "warnings": [{"warning": "NVSwitch fatal error", "error_id": 7}]}
    test = {"name": "diagnostic", "results": per_gpu, "test_summary": summary}
    text = json.dumps({"DCGM Diagnostic": {"test_categories": [{"category": "Stress", "tests": [test]}]}})
    result = dcgm.check(text, 2)
    assert (result.status, result.evidence) == (
        "fail",
        ["diagnostic (Stress) fail: NVSwitch fatal error (DCGM error 7)"],
    )
    assert result.summary == "level 2: diagnostic failed"
