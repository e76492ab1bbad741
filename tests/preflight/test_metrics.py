"""preflight's results as metrics: the catalog's families, one sample per check and verdict, served or a file."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from contract import metrics
from preflight.cli import main
from preflight.metrics import PreflightMetrics
from preflight.report import Result
from telemetry.exposition import check, table
from tests.conftest import REPO

FIXTURES = Path(__file__).parent / "fixtures"


def _checks(text: str) -> dict[tuple[str, str], float]:
    return {
        (s.labels["check"], s.labels["verdict"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "meridian_preflight_checks_total"
    }


def test_a_run_writes_its_verdicts_as_a_textfile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "preflight.prom"
    argv = ["run", "--check", "gpu-state", "--check", "kernel-log", "--metrics-file", str(out)]
    argv += ["--nvidia-smi", str(FIXTURES / "nvidia-smi-faulty.csv"), "--kernel-log", str(FIXTURES / "journal.txt")]
    assert main([*argv, "--window", "1e12", "--expect-gpus", "8"]) == 1
    text = out.read_text()
    assert check(metrics.PREFLIGHT, text) == []
    assert _checks(text) == {("gpu-state", "fail"): 1, ("kernel-log", "fail"): 1}
    stamp = [s.value for f in text_string_to_metric_families(text) for s in f.samples if "last_run" in s.name]
    assert stamp[0] > time.time() - 600


def test_an_unwritable_metrics_file_is_a_warning_not_a_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "--check", "gpu-state", "--nvidia-smi", str(FIXTURES / "nvidia-smi-healthy.csv")]
    assert main([*argv, "--expect-gpus", "8", "--metrics-file", str(tmp_path / "missing" / "x.prom")]) == 0
    assert "warning: could not write" in capsys.readouterr().err


def test_results_are_served_while_it_runs() -> None:
    live = PreflightMetrics()
    port = live.serve(0)
    live.record(Result("shm", "pass", "ok"))
    live.record(Result("nccl", "error", "cannot read"))
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
    finally:
        live.server.shutdown()
    assert check(metrics.PREFLIGHT, text) == []
    assert _checks(text) == {("shm", "pass"): 1, ("nccl", "error"): 1}


def test_the_readme_lists_exactly_the_catalog() -> None:
    assert table(metrics.PREFLIGHT) in (REPO / "platform/preflight/README.md").read_text()
