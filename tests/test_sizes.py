"""Code a reader can hold: no source file over 600 lines, no function over 60 (issue 29).

Counted from the source (platform/*/src, infra's stacks, scripts), tests excluded: a long test
table is data. A function that must grow past the limit is split where its steps are.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REPO

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 60


def _sources() -> Iterator[Path]:
    for pattern in ("platform/*/src/**/*.py", "infra/meridian_infra/**/*.py", "infra/*.py", "scripts/*.py"):
        yield from (p for p in sorted(REPO.glob(pattern)) if ".venv" not in p.parts)


def long_functions(tree: ast.AST, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > limit
    ]


def test_no_source_file_is_over_600_lines() -> None:
    long = {str(p.relative_to(REPO)): n for p in _sources() if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES}
    assert long == {}


def test_no_function_is_over_60_lines() -> None:
    found = {
        f"{p.relative_to(REPO)}:{name}": lines
        for p in _sources()
        for name, lines in long_functions(ast.parse(p.read_text()))
    }
    assert found == {}


def test_the_count_sees_a_long_function() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    assert long_functions(ast.parse(f"def f():\n{body}\n")) == [("f", 62)]
    assert long_functions(ast.parse("def g():\n    return 1\n")) == []
