"""The node-health contract: what preflight and Warden write reads back; anything else is one line, never a verdict."""

from __future__ import annotations

import pytest

from contract import health
from contract.problem import Invalid

CHECK = health.DeepCheck(
    time=1_764_547_200.0,
    kind="burn_in",
    verdict="fail",
    level=3,
    failures=(health.Failure(check="dcgm_diag", gpu=5, evidence="Memory test: GPU 5 miscompare"),),
)


def test_a_record_round_trips_as_one_compact_line() -> None:
    text = health.dumps(CHECK)
    assert "\n" not in text
    assert health.loads(text, "node/a") == CHECK


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"schema": "meridian.deepcheck/v1", "time": 1, "kind": "sweep", "verdict": "ok"}', "verdict: 'ok'"),
        ('{"schema": "meridian.deepcheck/v1", "time": 1, "kind": "sweep", "verdict": "pass", "x": 1}', "x"),
        ('{"schema": "meridian.deepcheck/v2", "time": 1, "kind": "sweep", "verdict": "pass"}', "schema"),
        ('{"schema": "meridian.deepcheck/v1", "time": true, "kind": "sweep", "verdict": "pass"}', "time"),
        ("[" * 100_000, "longer than"),
        ("not json", "not JSON"),
    ],
)
def test_a_hand_edited_record_is_refused_in_one_line(text: str, says: str) -> None:
    with pytest.raises(Invalid) as refused:
        health.loads(text, "node/a")
    assert len(refused.value.lines) == 1
    assert refused.value.lines[0].startswith("node/a: ")
    assert says in refused.value.lines[0]
    assert "make generate" not in refused.value.lines[0]  # the annotation is Warden's, not a generated file


REPORT = health.Report(
    check="dcgm-diag",
    summary="level 2: memory failed on GPU 5",
    time=1_764_547_200.0,
    gpu=5,
    evidence=("GPU 5: memory fail",),
)


def test_a_report_round_trips_and_keeps_its_gpu() -> None:
    text = health.dump_report(REPORT)
    assert "\n" not in text
    assert health.load_report(text, "pod/x: termination message") == REPORT


def test_a_report_fits_the_termination_limit_evidence_first() -> None:
    big = health.Report(
        check="shm", summary="s" * 100, time=1.0, gpu=None, evidence=tuple("e" * 1000 for _ in range(8))
    )
    text = health.dump_report(big)
    assert len(text.encode()) <= health.REPORT_MAX_BYTES
    assert health.load_report(text, "t") == health.Report(
        check="shm", summary="s" * 100, time=1.0, gpu=None, evidence=big.evidence[:3]
    )


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"gpu": 64}, "gpu: 64 is not a GPU index"),
        ({"gpu": -1}, "gpu: -1"),
        ({"gpu": True}, "gpu"),
        ({"time": 1e12}, "not a time"),
        ({"check": "rm -rf /; echo"}, "not a check name"),
        ({"verdict": "pass"}, "verdict: unknown field"),
        ({"schema": "meridian.preflight/v1"}, "schema"),
    ],
)
def test_a_forged_report_is_refused_in_one_line(fields: dict[str, object], says: str) -> None:
    import json

    data = {**json.loads(health.dump_report(REPORT)), **fields}
    with pytest.raises(Invalid) as refused:
        health.load_report(json.dumps(data), "pod/x: termination message")
    (line,) = refused.value.lines
    assert line.startswith("pod/x: termination message: ")
    assert says in line


def test_a_deep_check_with_an_impossible_gpu_is_refused() -> None:
    bad = health.DeepCheck(time=1.0, kind="verify", verdict="fail", failures=(health.Failure(check="x", gpu=99),))
    with pytest.raises(Invalid, match="gpu: 99"):
        health.loads(health.dumps(bad), "node/a")
