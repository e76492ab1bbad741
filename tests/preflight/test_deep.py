"""`preflight run --deep`: the CLI, its one-line errors, and the report read back as contract.health failures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contract import health
from contract.problem import Invalid
from preflight import deep
from preflight.cli import main
from preflight.report import SCHEMA, Result, as_json, termination_message

FIXTURES = Path(__file__).parent / "fixtures"
DCGM = FIXTURES / "dcgm"


def _sysfs(root: Path, nics: int = 8) -> None:
    for i in range(nics):
        port = root / "sys/class/infiniband" / f"mlx5_{i}" / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text("4: ACTIVE\n")
        (port / "phys_state").write_text("5: LinkUp\n")
        (port / "rate").write_text("400 Gb/sec (4X NDR)\n")


def _report(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, dict[str, Any]]:
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


def test_deep_adds_the_deep_checks_after_the_usual_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for key in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    _sysfs(tmp_path)
    argv = [
        "run",
        "--kernel-log",
        str(FIXTURES / "journal.txt"),
        "--nvidia-smi",
        str(FIXTURES / "nvidia-smi-healthy.csv"),
    ]
    argv += ["--cpu", "--root", str(tmp_path), "--json"]
    _, plain = _report(capsys, argv)
    code, report = _report(capsys, [*argv, "--deep", "--level", "3", "--dcgmi", str(DCGM / "memory-fail.json")])
    names = [c["name"] for c in report["checks"]]
    assert names == [c["name"] for c in plain["checks"]] + ["rdma-links", "nccl-multinode", "dcgm-diag"]
    verdicts = {c["name"]: (c["status"], c["summary"]) for c in report["checks"][-3:]}
    assert verdicts["rdma-links"][0] == "pass"
    assert verdicts["nccl-multinode"][0] == "skip"
    assert verdicts["dcgm-diag"] == ("fail", "level 3: memory failed on GPU 3")
    assert code == 1
    assert health.Failure(check="dcgm-diag", gpu=3, evidence=report["checks"][-1]["evidence"][0]) in deep.failures(
        report
    )


def test_without_deep_nothing_changes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--check", "kernel-log", "--kernel-log", str(FIXTURES / "journal.txt")]) in (0, 1)
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert "dcgm" not in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--level", "3"], "error: --level is for the deep checks: add --deep"),
        (["--peers", "a"], "error: --peers is for the deep checks: add --deep"),
        (["--deep", "--level", "5"], "error: --level '5': DCGM run levels are 1, 2, 3 and 4"),
        (["--deep", "--level", "two"], "error: --level 'two': DCGM run levels are 1, 2, 3 and 4"),
        (["--deep", "--peers", "a;rm -rf /"], "error: --peers/--self: 'a;rm -rf /' is not a host name"),
        (["--deep", "--peers", "a", "--peer-port", "http"], "error: --peer-port 'http': expected a TCP port number"),
        (["--deep", "--peers", "a", "--peer-port", "70000"], "error: --peer-port: 70000 is not a TCP port"),
        (["--deep", "--peer-timeout", "0"], "error: --peer-timeout 0: expected seconds"),
        (["--deep", "--dcgm-timeout", "nan"], "error: --dcgm-timeout nan: expected seconds"),
        (["--check", "dcgm"], "error: unknown check 'dcgm'; use one of"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(message)
    assert captured.err.count("\n") == 1


def test_a_deep_check_by_name_needs_no_deep_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--check", "dcgm-diag", "--level", "1", "--dcgmi", str(DCGM / "pass.json")])
    assert code == 0
    assert capsys.readouterr().out.startswith("PASS  dcgm-diag: level 1: 17 test result(s) passed")


def test_an_unreadable_saved_output_is_an_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["run", "--check", "dcgm-diag", "--dcgmi", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().out


def test_failures_of_a_whole_report() -> None:
    results = [
        Result("kernel-log", "pass", "fine"),
        Result("gpu-state", "fail", "GPU 2 has 3 uncorrectable ECC errors", ["GPU 2 ...", "more"]),
        Result(
            "rdma-links",
            "fail",
            "mlx5_4 port 1: state DOWN, expected ACTIVE",
            ["mlx5_4 port 1: state DOWN, expected ACTIVE"],
        ),
        Result("nccl-multinode", "error", "the all-reduce with 1 peer(s) did not finish within 300 s"),
        Result(
            "dcgm-diag",
            "fail",
            "level 2: pcie failed on GPU 5 (+1 more)",
            ["GPU 5: pcie (Integration) fail: x", "memory (Hardware) fail"],
        ),
        Result("compute", "skip", "no GPU"),
    ]
    assert deep.failures(as_json(results, "node-1", "2026-12-01T00:00:00+00:00")) == (
        health.Failure(check="gpu-state", gpu=None, evidence="GPU 2 has 3 uncorrectable ECC errors"),
        health.Failure(check="rdma-links", gpu=None, evidence="mlx5_4 port 1: state DOWN, expected ACTIVE"),
        health.Failure(
            check="nccl-multinode",
            gpu=None,
            evidence="could not run: the all-reduce with 1 peer(s) did not finish within 300 s",
        ),
        health.Failure(check="dcgm-diag", gpu=5, evidence="GPU 5: pcie (Integration) fail: x"),
        health.Failure(check="dcgm-diag", gpu=None, evidence="memory (Hardware) fail"),
    )


def test_failures_of_a_termination_message_fit_a_deep_check_record() -> None:
    evidence = [f"GPU {i}: memory (Hardware) fail: " + "x" * 100 for i in range(40)]
    message = termination_message([Result("dcgm-diag", "fail", "level 3: memory failed on GPU 0", evidence, 0)], 0.0)
    assert message is not None
    found = deep.read(message, "termination message")
    assert [f.gpu for f in found] == [0, 1, 2, 3, 4]  # the message keeps 5 evidence lines
    record = health.DeepCheck(time=1.0, kind="burn_in", verdict="fail", level=3, failures=found)
    assert health.loads(health.dumps(record), "node") == record


def test_many_failures_are_capped() -> None:
    report = as_json(
        [Result("rdma-links", "fail", "s", [f"mlx5_{i} port 1: state DOWN" for i in range(100)])], "n", "t"
    )
    found = deep.failures(report)
    assert len(found) == deep.MAX_PER_CHECK + 1
    assert found[-1] == health.Failure(check="rdma-links", gpu=None, evidence=f"... {100 - deep.MAX_PER_CHECK} more")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[]",
        "{}",
        json.dumps({"schema": "other/v1", "checks": []}),
        json.dumps({"schema": SCHEMA, "checks": {}}),
        json.dumps({"schema": SCHEMA, "checks": [5]}),
        json.dumps({"schema": SCHEMA, "checks": [{"name": "x", "status": "fail", "summary": 3}]}),
        json.dumps({"schema": SCHEMA, "checks": [{"name": "x", "status": "fail", "summary": "s", "evidence": [1]}]}),
        json.dumps({"schema": SCHEMA, "check": None}),
        json.dumps({"schema": health.REPORT_SCHEMA, "check": "x", "summary": "s", "time": 1, "gpu": 99}),
        json.dumps({"schema": health.REPORT_SCHEMA, "check": "x", "summary": "s", "time": "t"}),
        "[" * 100_000,
    ],
)
def test_anything_else_is_one_line_invalid(text: str) -> None:
    with pytest.raises(Invalid) as caught:
        deep.read(text, "job log")
    (line,) = caught.value.lines
    assert line.startswith("job log")
    assert "\n" not in line
