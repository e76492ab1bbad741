"""fleet and infra depend on the contract, never on the tools that read what they generate."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from tests.conftest import REPO

TOOLS = {"gkr", "preflight", "warden", "trainer"}
SOURCES = [REPO / "platform/fleet/src/fleet", REPO / "infra/meridian_infra", REPO / "infra/main.py"]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def test_fleet_and_infra_import_no_tool() -> None:
    files = [f for source in SOURCES for f in ([source] if source.is_file() else sorted(source.rglob("*.py")))]
    assert len(files) > 30
    wrong = {f"{f.relative_to(REPO)}: {sorted(_imports(f) & TOOLS)}" for f in files if _imports(f) & TOOLS}
    assert wrong == set()


def test_fleet_does_not_depend_on_a_tool() -> None:
    project = tomllib.loads((REPO / "platform/fleet/pyproject.toml").read_text())["project"]
    requirements = [
        *project["dependencies"],
        *(r for extra in project["optional-dependencies"].values() for r in extra),
    ]
    assert not [
        r for r in requirements if r.startswith("meridian-") and r not in {"meridian-contract", "meridian-safeyaml"}
    ]
