"""Plans are computed once per load: only fleet.load calls the planners; everything else reads the
LoadedFleet's `addresses` and `quotas` (DESIGN.md, "One source of truth")."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PLANNERS = {"plan_addresses", "plan_quotas"}
SOURCES = [REPO / "platform" / "fleet" / "src", REPO / "infra" / "meridian_infra", REPO / "platform" / "review" / "src"]
LOADER = REPO / "platform" / "fleet" / "src" / "fleet" / "load.py"


def planner_calls(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if called in PLANNERS:
                found.append(f"{path.relative_to(REPO)}:{node.lineno} {called}")
    return found


def test_only_the_loader_plans() -> None:
    calls = [call for root in SOURCES for path in sorted(root.rglob("*.py")) for call in planner_calls(path)]
    assert calls, "no planner call found at all: has the loader moved?"
    assert [c for c in calls if not c.startswith(str(LOADER.relative_to(REPO)))] == []
