"""A side's plan document is the pull request's output: read as hostile data, refused in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from review import side
from tests.review.conftest import Sandbox, at_base, review_cli


def document(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "format": side.FORMAT,
        "plan": {"regions": [{"name": "r1", "capacity": {"gpus": 8}}], "teams": [{"name": "t", "quota": {"r1": 8}}]},
        "generate_check": {"returncode": 0, "stderr": ""},
        "stacks": {"r1": {"resource": {}}},
    }
    doc.update(changes)
    return doc


def test_a_good_document_reads() -> None:
    read = side.parse(json.dumps(document()), "head.json")
    assert (read.generate_returncode, list(read.stacks), read.plan["teams"][0]["quota"]) == (0, ["r1"], {"r1": 8})


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "head.json: not JSON ("),
        (json.dumps([1]), "head.json: not a meridian-plan-side/1 document (written by scripts/plan_side.py)"),
        (json.dumps(document(format="other/1")), "head.json: not a meridian-plan-side/1 document"),
        (json.dumps(document(stacks=[])), "head.json.stacks: not an object of stacks"),
        (
            json.dumps(document(generate_check={"returncode": True, "stderr": ""})),
            "head.json.generate_check.returncode",
        ),
        (
            json.dumps(document(plan={"teams": [{"name": "t", "quota": {"r1": "8"}}]})),
            "head.json.plan.teams[0].quota.r1",
        ),
        (json.dumps(document(plan={"teams": [{"name": "t", "quota": {"r1": 10**30}}]})), "is not a count"),
        (json.dumps(document(plan={"regions": [{"name": "r", "capacity": {"gpus": -1}}]})), "capacity.gpus"),
        (json.dumps(document(stacks={"r1": {"resource": json.loads(deep(80))}})), "nested deeper than 64 levels"),
        (deep(100_000), "head.json: not JSON ("),  # deeper than the parser's own recursion
    ],
)
def test_a_hostile_document_is_refused_in_one_line(text: str, message: str) -> None:
    with pytest.raises(side.SideError) as caught:
        side.parse(text, "head.json")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_document_too_large_is_refused_before_it_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(side, "MAX_BYTES", 100)
    path = tmp_path / "head.json"
    path.write_text(json.dumps(document()))
    with pytest.raises(side.SideError, match=r"head.json: \d+ bytes, more than the 100 a plan document may have"):
        side.load(path)
    # The plan job failed and wrote no document: the decision says where the reason is.
    with pytest.raises(side.SideError, match=r"missing\.json: no plan document: the side.s plan could not be made"):
        side.load(tmp_path / "missing.json")


@pytest.mark.scenario
def test_the_cli_fails_closed_on_a_bad_head_document(
    sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, base = at_base(sandbox)
    bad = tmp_path / "head-plan.json"
    bad.write_text(json.dumps(document(stacks="nope")))
    out = tmp_path / "review.md"
    assert review_cli(repo, base, out, "--head-plan", str(bad)) == 2
    assert capsys.readouterr().err == f"error: HEAD: {bad}.stacks: not an object of stacks\n"
    assert not out.exists()
