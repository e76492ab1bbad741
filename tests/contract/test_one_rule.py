"""Knowledge written once: a second typed decoder or a second team-pools rule fails here.

Read from the source (every module under platform/*/src, infra and scripts), so a copy
cannot slip in beside the one the tests exercise.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REPO

DECODER = Path("platform/contract/src/contract/codec.py")
TEAM_POOLS = Path("platform/contract/src/contract/registry.py")


def _sources() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted([*REPO.glob("platform/*/src/**/*.py"), *REPO.glob("infra/**/*.py"), *REPO.glob("scripts/*.py")]):
        if ".venv" not in path.parts and "node_modules" not in path.parts:
            yield path.relative_to(REPO), ast.parse(path.read_text(), str(path))


def _walks_annotations(tree: ast.Module) -> bool:
    """Reads a class's resolved annotations: what a typed decoder does to walk dataclass fields."""
    for node in ast.walk(tree):
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
        if name in ("get_type_hints", "__annotations__"):
            return True
    return False


def _is_team_pools_rule(node: ast.AST) -> bool:
    """`<x>.team in (None, <team>)`: the test that says which pools a team may use."""
    return (
        isinstance(node, ast.Compare)
        and isinstance(node.left, ast.Attribute)
        and node.left.attr == "team"
        and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops)
        and any(
            isinstance(c, ast.Tuple | ast.List | ast.Set)
            and any(isinstance(e, ast.Constant) and e.value is None for e in c.elts)
            for c in node.comparators
        )
    )


def test_one_typed_decoder() -> None:
    decoders = [str(path) for path, tree in _sources() if _walks_annotations(tree)]
    assert decoders == [str(DECODER)], "decode typed data with contract.codec.decode, not a second walker"


def test_one_team_pools_rule() -> None:
    rules = [str(path) for path, tree in _sources() if any(_is_team_pools_rule(n) for n in ast.walk(tree))]
    assert rules == [str(TEAM_POOLS)], "use contract.registry.team_pools"


def test_the_checks_see_a_copy(tmp_path: Path) -> None:
    copy = ast.parse("def f(pools, t):\n    return [p for p in pools if p.team in (None, t)]\n")
    assert any(_is_team_pools_rule(n) for n in ast.walk(copy))
    assert _walks_annotations(ast.parse("from typing import get_type_hints\nhints = get_type_hints(C)\n"))
    assert not _walks_annotations(ast.parse("x = 1\n"))


def test_contract_types_are_built_by_keyword() -> None:
    """A positional call would silently swap two fields of one type (a report's check and summary, say)."""
    positional = [
        f"{path}:{node.name}"
        for path, tree in _sources()
        if path.parts[:4] == ("platform", "contract", "src", "contract")
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        for decorator in node.decorator_list
        if "dataclass" in ast.unparse(decorator) and "kw_only=True" not in ast.unparse(decorator)
    ]
    assert positional == []
