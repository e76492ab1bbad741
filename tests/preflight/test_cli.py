"""preflight's CLI: exit codes, JSON report schema, the collective check across real processes, Node annotation."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from contract import health, incluster
from contract.names import PREFLIGHT_FAILURE_ANNOTATION as ANNOTATION
from preflight.cli import main
from preflight.node import annotate
from preflight.report import SCHEMA, TERMINATION_LIMIT, Result, node_annotation, termination_message

FIXTURES = Path(__file__).parent / "fixtures"
PREFLIGHT = Path(sys.executable).parent / "preflight"


def test_exit_codes_and_one_line_per_check(capsys: pytest.CaptureFixture[str]) -> None:
    healthy = [
        "run",
        "--check",
        "gpu-state",
        "--nvidia-smi",
        str(FIXTURES / "nvidia-smi-healthy.csv"),
        "--expect-gpus",
        "8",
    ]
    assert main(healthy) == 0
    assert capsys.readouterr().out == "PASS  gpu-state: 8 GPUs healthy, driver 570.124.06, CUDA 12.8\n"
    faulty = [
        "run",
        "--check",
        "gpu-state",
        "--check",
        "kernel-log",
        "--nvidia-smi",
        str(FIXTURES / "nvidia-smi-faulty.csv"),
        "--kernel-log",
        str(FIXTURES / "journal.txt"),
    ]
    assert main([*faulty, "--window", "1e12", "--expect-gpus", "8"]) == 1
    out = capsys.readouterr().out.splitlines()
    lines = [line for line in out if not line.startswith(" ")]  # one line per check; evidence indented below
    assert lines[0].startswith("FAIL  gpu-state: 7 GPUs visible, the pool's machine has 8 (+5 more)")
    assert lines[1].startswith("FAIL  kernel-log: 1 hardware error(s)")
    assert out[1].startswith("      ")  # the evidence, without --json
    assert len(out) > len(lines)
    (FIXTURES.parent / "unused").exists()
    assert main(["run", "--check", "gpu-state", "--nvidia-smi", str(FIXTURES / "dmesg.txt")]) == 2
    assert main(["run", "--check", "bogus"]) == 2
    assert "unknown check 'bogus'; use one of kernel-log, gpu-state, compute, allreduce" in capsys.readouterr().err


def test_json_report_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--check", "compute", "--cpu", "--min-tflops", "1e-6", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"schema", "node", "time", "passed", "checks"}
    assert report["schema"] == SCHEMA
    assert report["passed"] is True
    (check,) = report["checks"]
    assert set(check) == {"name", "status", "summary", "evidence", "gpu"}
    assert check["name"] == "compute"
    assert check["evidence"][0].startswith("cpu: ")


def test_compute_threshold_fails_a_slow_device(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--check", "compute", "--cpu", "--min-tflops", "1e6"]) == 1
    assert "below 1e+06" in capsys.readouterr().out


def test_allreduce_without_rendezvous_is_skipped_or_an_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for key in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    assert main(["run", "--check", "allreduce"]) == 0
    assert capsys.readouterr().out.startswith("SKIP  allreduce: a single process")
    monkeypatch.setenv("RANK", "0")
    assert main(["run", "--check", "allreduce"]) == 2


class _Recorder(BaseHTTPRequestHandler):
    requests: ClassVar[list[dict[str, Any]]] = []

    def do_PATCH(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Recorder.requests.append({"path": self.path, "headers": dict(self.headers), "body": json.loads(body)})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: Any) -> None:
        pass


def test_a_failure_becomes_the_node_annotation_warden_reads(tmp_path: Path) -> None:
    results = [
        Result("kernel-log", "pass", "ok"),
        Result("gpu-state", "fail", "GPU 1: 2 uncorrectable ECC errors", [f"line {i}" for i in range(9)], 1),
    ]
    annotation = node_annotation(results, 1_764_410_400.0)
    assert annotation is not None
    assert list(annotation) == [ANNOTATION] == ["meridian.dev/preflight-failure"]
    # Read back with the node-health contract's decoder, as Warden and gkr read it.
    assert health.load_report(annotation[ANNOTATION], ANNOTATION) == health.Report(
        check="gpu-state",
        summary="GPU 1: 2 uncorrectable ECC errors",
        time=1_764_410_400.0,
        gpu=1,
        evidence=tuple(f"line {i}" for i in range(5)),
    )
    assert node_annotation(results[:1], 0.0) is None

    server = HTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    try:
        annotate(
            incluster.Cluster(api=f"http://127.0.0.1:{server.server_port}", token_file=str(token)),
            "gke-h200-a-7f3c",
            annotation,
        )
    finally:
        server.shutdown()
    (request,) = _Recorder.requests
    assert request["path"] == "/api/v1/nodes/gke-h200-a-7f3c"
    assert request["headers"]["Content-Type"] == "application/merge-patch+json"
    assert request["headers"]["Authorization"] == "Bearer t0ken"
    assert request["body"] == {"metadata": {"annotations": annotation}}


def test_annotation_refused_is_a_warning_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:

    class Refusing(BaseHTTPRequestHandler):
        def do_PATCH(self) -> None:
            self.send_response(403)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    token = tmp_path / "token"
    token.write_text("t")
    cluster = incluster.Cluster(api=f"http://127.0.0.1:{server.server_port}", token_file=str(token))
    monkeypatch.setattr(incluster, "discover", lambda: cluster)
    monkeypatch.setenv("NODE_NAME", "gke-node-1")
    try:
        code = main(
            ["run", "--check", "gpu-state", "--nvidia-smi", str(FIXTURES / "nvidia-smi-faulty.csv"), "--annotate"]
        )
    finally:
        server.shutdown()
    assert code == 1  # the check's verdict, not the annotation's
    err = capsys.readouterr().err
    assert err.startswith("warning: could not annotate Node gke-node-1 (PATCH /api/v1/nodes/gke-node-1: HTTP 403: ")
    assert len(err.splitlines()) == 1


def test_a_failure_becomes_a_termination_message_within_the_kubelet_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "termination-log"
    code = main(
        [
            "run",
            "--check",
            "gpu-state",
            "--nvidia-smi",
            str(FIXTURES / "nvidia-smi-faulty.csv"),
            "--termination-log",
            str(log),
        ]
    )
    assert code == 1
    message = health.load_report(log.read_text(), "termination log")
    assert message.check == "gpu-state"
    assert message.gpu is not None  # the faulty fixture's first problem is one GPU's
    assert message.summary
    capsys.readouterr()
    for summary in ("x" * 9000, "\u00e9\u2603" * 3000):  # escaped in JSON: cut by encoded bytes, not characters
        huge = [Result("shm", "fail", summary, ["e" * 3000] * 5)]
        text = termination_message(huge, 0.0)
        assert text is not None
        assert len(text.encode()) <= TERMINATION_LIMIT
        report = health.load_report(text, "termination log")
        assert report.evidence == ()
        assert summary.startswith(report.summary)
        assert len(report.summary) > 100
    assert termination_message([Result("shm", "pass", "ok")], 0.0) is None
    passing = tmp_path / "passing-log"
    assert main(["run", "--check", "kernel-log", "--kernel-log", str(log), "--termination-log", str(passing)]) == 0
    assert not passing.exists()  # nothing to say: the kubelet keeps an empty message
