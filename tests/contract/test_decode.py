"""The one decoder: every problem with its path, bounds from the field's declaration, one message style."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Literal

import pytest

from contract import codec
from contract.problem import Invalid


@dataclass(frozen=True, kw_only=True)
class Inner:
    mode: Literal["a", "b"] = "a"
    betas: tuple[float, float] = (0.9, 0.95)


@dataclass(frozen=True, kw_only=True)
class Outer:
    name: str
    pods: int = codec.setting(1, low=1, high=64, help="pods", flag="--pods")
    lr: float = codec.setting(0.1, above=0)
    ttl: int | None = None
    command: str | tuple[str, ...] | None = None
    env: dict[str, str] = field(default_factory=dict)
    inner: Inner = field(default_factory=Inner)


def lines(data: object, **kw: object) -> list[str]:
    value, problems = codec.decode(Outer, data, fix="fix it", **kw)  # type: ignore[arg-type]
    assert (value is None) == bool(problems)
    return [p.line() for p in problems]


def test_a_good_document_decodes_with_defaults() -> None:
    value, problems = codec.decode(Outer, {"name": "x", "command": ["a", "b"], "inner": {"betas": [1, 0.5]}})
    assert problems == []
    assert value == Outer(name="x", command=("a", "b"), inner=Inner(betas=(1.0, 0.5)))


def test_every_problem_is_collected_with_its_path() -> None:
    # "nmae" is one mistake, not two: its did-you-mean names the missing field.
    found = lines({"nmae": "x", "pods": 0, "lr": float("nan"), "inner": {"mode": "c", "betas": [1]}, "env": {"A": 1}})
    assert found == [
        "nmae: unknown field; did you mean name? use one of command, env, inner, lr, name, pods, ttl",
        "pods: must be at least 1 (got 0); fix it",
        "lr: nan is not a finite number; fix it",
        "env.A: 1 is not a string; fix it",
        "inner.mode: 'c' is not one of 'a', 'b'; fix it",
        "inner.betas: expected a list of 2 values, got 1; fix it",
    ]


@pytest.mark.parametrize(
    ("data", "line"),
    [
        ({"name": "x", "pods": 65}, "pods: must be at most 64 (got 65); fix it"),
        ({"name": "x", "pods": True}, "pods: True is not an integer; fix it"),
        ({"name": "x", "lr": 0}, "lr: must be greater than 0 (got 0.0); fix it"),
        ({"name": "x", "ttl": "1"}, "ttl: '1' is not an integer; fix it"),
        ({"name": "x", "command": [1]}, "command: [1] is not a string or a list or null; fix it"),
        ({"name": "x" * 200}, None),
        ([], "(document): [] is not an object; fix it"),
    ],
)
def test_each_kind_of_mistake_is_one_line(data: object, line: str | None) -> None:
    assert lines(data) == ([line] if line else [])


def test_null_stands_for_the_default_only_when_asked() -> None:
    assert lines({"name": "x", "pods": None}) == ["pods: None is not an integer; fix it"]
    value, problems = codec.decode(Outer, {"name": "x", "pods": None}, null_is_default=True)
    assert problems == []
    assert value is not None
    assert value.pods == 1


def test_the_fix_may_name_the_path_and_kind() -> None:
    _, problems = codec.decode(Outer, {"name": "x", "pods": "2"}, fix=lambda path, kind: f"set {path}=<{kind}>")
    assert [p.line() for p in problems] == ["pods: '2' is not an integer; set pods=<an integer>"]


def test_a_field_declares_its_setting_once() -> None:
    (pods,) = (f for f in fields(Outer) if f.name == "pods")
    assert codec.setting_of(pods) == codec.Setting(help="pods", flag="--pods", low=1, high=64)


def test_from_data_raises_every_line_with_where() -> None:
    with pytest.raises(Invalid) as caught:
        codec.from_data(Outer, {"pods": 0}, "job.yaml", fix="edit it")
    assert caught.value.lines == (
        "job.yaml: name: missing; edit it",
        "job.yaml: pods: must be at least 1 (got 0); edit it",
    )
