"""Spare replica groups, one rule (contract/spares.py): its bounds and counts, and no second copy of them.

Issue 40: gkr bounded `spare_groups` by 64 alone, the trainer by `ft.replica_groups` alone, so gkr rendered
44 pods for `spare_groups: 20` on a 2-group job and the trainer refused it only once the gang was admitted;
fleet's goodput model clamped its own way (`min(held, nodes - 1)`). The shipped code is read as syntax: a
bound (an ordering comparison), a pod count (a division or a product) or a clamp (min, max) over a spare
count anywhere but contract/spares.py is a second copy.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from contract import spares
from tests.conftest import REPO

RULE = Path("platform/contract/src/contract/spares.py")
# A spare count by the names the components give it: spares, spare_groups, spare_pods, SPARES_MAX...
COUNT = re.compile(r"(^|_)(spares|spare_groups|spare_pods)(_|$)", re.IGNORECASE)


@pytest.mark.parametrize(
    ("held", "groups", "line"),
    [
        (0, 2, None),
        (2, 2, None),
        (20, 2, "20 is more than the run's 2 replica groups; use 0 to 2"),
        (2, 1, "2 is more than the run's 1 replica group; use 0 to 1"),
        (64, 4096, None),
        (65, 4096, "65 is more than 64 spares; use 0 to 64"),
        (65, 64, "65 is more than 64 spares; use 0 to 64"),
        (-1, 8, "must be at least 0 (got -1); use 0 to 8"),
    ],
)
def test_the_bounds_are_relative_to_the_groups(held: int, groups: int, line: str | None) -> None:
    assert spares.problem(held, groups) == line


def test_the_default_is_always_within_the_bounds() -> None:
    for groups in [*range(1, 3000), 10**6]:
        assert spares.problem(spares.default_spare_groups(groups), groups) is None


@pytest.mark.parametrize(
    ("held", "group_gpus", "per_pod", "pods"),
    [(1, 16, 8, 2), (2, 16, 8, 4), (1, 4, 8, 1), (3, 4, 8, 2), (1, 8, 8, 1), (0, 8, 8, 0)],
)
def test_spares_take_whole_pods(held: int, group_gpus: int, per_pod: int, pods: int) -> None:
    assert spares.pods(held, group_gpus, per_pod) == pods


@pytest.mark.parametrize(
    ("nodes", "held"),
    [(1, 0), (255, 0), (256, 1), (257, 1), (384, 1), (1024, 1), (1025, 2), (1026, 2), (10**6, 64)],
)
def test_a_pool_holds_the_default_of_the_run_it_fits(nodes: int, held: int) -> None:
    """256 nodes: 255 groups (which hold no spare) and one idle node; 1,024: 1,023 groups and their spare."""
    assert spares.held_by_default(nodes) == held
    groups = nodes - held
    assert groups + spares.default_spare_groups(groups) <= nodes
    assert spares.problem_among(held, nodes) is None


def test_spares_among_a_pools_nodes_leave_enough_groups() -> None:
    assert spares.problem_among(2, 4) is None
    assert spares.problem_among(3, 4) == "3 among 4 nodes leave 1 group to train; use 0 to 2"
    assert spares.problem_among(65, 384) == "65 among 384 nodes leave 319 groups to train; use 0 to 64"


def _sources() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted([*REPO.glob("platform/*/src/**/*.py"), *REPO.glob("infra/**/*.py"), *REPO.glob("scripts/*.py")]):
        if ".venv" not in path.parts and "node_modules" not in path.parts:
            yield path.relative_to(REPO), ast.parse(path.read_text(), str(path))


def _mentions(node: ast.AST, aliases: set[str]) -> bool:
    for n in ast.walk(node):
        name = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else ""
        if COUNT.search(name) or (isinstance(n, ast.Name) and n.id in aliases):
            return True
    return False


def _own(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a module or function, less those of the functions inside it (their own scopes)."""
    for child in ast.iter_child_nodes(scope):
        yield child
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from _own(child)


def _aliases(nodes: list[ast.AST]) -> set[str]:
    """Names assigned a spare count under another name (`count = spares(spec)`, `held = default_spare_groups(n)`)."""
    found: set[str] = set()
    assigns = [n for n in nodes if isinstance(n, ast.Assign | ast.AnnAssign | ast.NamedExpr) and n.value is not None]
    while True:  # an alias of an alias too
        more = {
            t.id
            for n in assigns
            if n.value is not None and _mentions(n.value, found)
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            if isinstance(t, ast.Name) and t.id not in found
        }
        if not more:
            return found
        found |= more


def _counts_or_bounds(node: ast.AST) -> bool:
    """A bound (an ordering comparison), a count (a division or a product) or a clamp (min, max)."""
    if isinstance(node, ast.Compare):
        return any(isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE) for op in node.ops)
    if isinstance(node, ast.BinOp):
        return isinstance(node.op, ast.FloorDiv | ast.Div | ast.Mult | ast.Mod)
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max")


def _copies(tree: ast.AST) -> list[str]:
    """The expressions that bound, count pods of or clamp a spare count, as source text, scope by scope."""
    found = []
    scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda))]
    for scope in scopes:
        nodes = list(_own(scope))
        aliases = _aliases(nodes)
        found += [ast.unparse(n) for n in nodes if _counts_or_bounds(n) and _mentions(n, aliases)]
    return found


def test_the_rule_is_the_contracts() -> None:
    again = {str(path): found for path, tree in _sources() if path != RULE and (found := _copies(tree))}
    assert again == {}, "bound, count and default spare groups with contract.spares (problem, pods, held_by_default)"


def test_the_check_sees_each_kind_of_copy() -> None:
    """The check above passes on an empty tree: show it catches a bound, a pod count and a clamp, by any name."""
    source = (
        "def f(spec, cfg, nodes):\n"
        "    if cfg.ft.spare_groups > cfg.ft.replica_groups:\n"
        "        count = spares(spec)\n"
        "        return -(-count * 16 // 8)\n"
        "    held = default_spare_groups(nodes)\n"
        "    return min(held, nodes - 1)\n"
        "def g(count):\n"
        "    return count * 2\n"  # another function's `count`: not a spare count
    )
    assert sorted(_copies(ast.parse(source))) == [
        "-count * 16",
        "-count * 16 // 8",
        "cfg.ft.spare_groups > cfg.ft.replica_groups",
        "min(held, nodes - 1)",
    ]
    assert _copies(ast.parse("if spare > cost:\n    room = max(0, spare)\n")) == []  # bytes to spare: not a count
    assert _copies(ast.parse((REPO / RULE).read_text()))  # the rule itself has them
