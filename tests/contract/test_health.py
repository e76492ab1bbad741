"""A node's deep-check record: what Warden writes reads back; a hand-edited annotation is one line, never a pass."""

from __future__ import annotations

import pytest

from contract import health
from contract.problem import Invalid

CHECK = health.DeepCheck(
    time=1_764_547_200.0,
    kind="burn_in",
    verdict="fail",
    level=3,
    failures=(health.Failure("dcgm_diag", 5, "Memory test: GPU 5 miscompare"),),
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
