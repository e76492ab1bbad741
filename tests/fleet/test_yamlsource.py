"""The YAML reader keeps lines for every path and rejects duplicate keys."""

from __future__ import annotations

import pytest

from contract.problem import dotted
from fleet.yamlsource import YamlSyntaxError, parse


def test_lines_for_nested_paths() -> None:
    source, problems = parse("a:\n  b:\n    - x\n    - y: 1\n      z: 2\n")
    assert problems == []
    assert source.data == {"a": {"b": ["x", {"y": 1, "z": 2}]}}
    assert source.line_of(("a", "b", 1, "z")) == 5
    assert source.line_of(("a", "b", 0)) == 3
    # A path that is not written falls back to its nearest written parent.
    assert source.line_of(("a", "b", 1, "missing")) == 4


def test_duplicate_keys_are_problems() -> None:
    _, problems = parse("a: 1\nb:\n  c: 1\n  c: 2\n")
    assert [(dotted(p.path), p.message.split(";")[0]) for p in problems] == [
        ("b.c", "key appears twice in the same mapping")
    ]


def test_syntax_error_names_the_line() -> None:
    with pytest.raises(YamlSyntaxError) as info:
        parse("a: 1\nb: [1, 2\nc: 3\n")
    assert info.value.line >= 2
