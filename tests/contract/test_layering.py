"""The components depend one way: contract at the bottom, fleet above it, consumers beside, review on top.

Read from what a user installs (each pyproject's dependencies) and from what
the code imports (every import statement, inside functions too), so neither
can drift: a component that starts importing fleet fails here.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import REPO

# Distribution -> (its packages' source folders, the meridian distributions it may depend on).
LAYERS: dict[str, tuple[tuple[str, ...], set[str]]] = {
    "meridian-contract": (("platform/contract/src/contract",), set()),
    "meridian-safeyaml": (("platform/safeyaml/src/safeyaml",), set()),
    # Metric collectors and their exposition, shared by preflight, Warden and the trainer on the contract floor.
    "meridian-telemetry": (("platform/telemetry/src/telemetry",), {"meridian-contract"}),
    "meridian-preflight": (("platform/preflight/src/preflight",), {"meridian-contract", "meridian-telemetry"}),
    # Warden's node agent parses the kernel log with contract.kernel_log, the parser preflight's check uses.
    "meridian-warden": (("platform/warden/src/warden",), {"meridian-contract", "meridian-telemetry"}),
    "meridian-trainer": (("platform/trainer/src/trainer",), {"meridian-contract", "meridian-telemetry"}),
    "meridian-gkr": (("platform/gkr/src/gkr",), {"meridian-contract", "meridian-safeyaml"}),
    "meridian-fleet": (("platform/fleet/src/fleet",), {"meridian-contract", "meridian-safeyaml"}),
    "meridian-infra": (("infra/meridian_infra",), {"meridian-contract", "meridian-fleet"}),
    "meridian-review": (
        ("platform/review/src/review",),
        {"meridian-contract", "meridian-safeyaml", "meridian-fleet", "meridian-infra"},
    ),
    # The cluster twin reads rendered objects and runs them (fleet: the machine a pod lands on); nothing imports it.
    "meridian-twin": (
        ("platform/twin/src/twin",),
        {"meridian-contract", "meridian-safeyaml", "meridian-preflight", "meridian-fleet"},
    ),
}
PACKAGES = {
    "contract": "meridian-contract",
    "safeyaml": "meridian-safeyaml",
    "telemetry": "meridian-telemetry",
    "preflight": "meridian-preflight",
    "warden": "meridian-warden",
    "trainer": "meridian-trainer",
    "gkr": "meridian-gkr",
    "fleet": "meridian-fleet",
    "meridian_infra": "meridian-infra",
    "review": "meridian-review",
    "twin": "meridian-twin",
}


def _pyprojects() -> dict[str, Path]:
    found = {}
    for path in [*REPO.glob("platform/*/pyproject.toml"), REPO / "infra" / "pyproject.toml"]:
        name = tomllib.loads(path.read_text())["project"]["name"]
        found[name] = path
    return found


def _declared(path: Path) -> set[str]:
    deps = tomllib.loads(path.read_text())["project"].get("dependencies", [])
    return {d.split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip() for d in deps}


def _imports(folder: Path) -> dict[str, str]:
    """Top-level module imported -> the first file importing it."""
    found: dict[str, str] = {}
    for file in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(file.read_text(), str(file))):
            if isinstance(node, ast.Import):
                tops = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                found.setdefault(top, str(file.relative_to(REPO)))
    return found


def test_every_distribution_is_placed_in_a_layer() -> None:
    assert set(_pyprojects()) == set(LAYERS)


@pytest.mark.parametrize("dist", sorted(LAYERS))
def test_declared_dependencies_stay_in_their_layer(dist: str) -> None:
    meridian = {d for d in _declared(_pyprojects()[dist]) if d.startswith("meridian-")}
    assert meridian <= LAYERS[dist][1], f"{dist} declares {sorted(meridian - LAYERS[dist][1])}"


@pytest.mark.parametrize("dist", sorted(LAYERS))
def test_imports_stay_in_their_layer_and_are_declared(dist: str) -> None:
    folders, allowed = LAYERS[dist]
    declared = _declared(_pyprojects()[dist])
    own = {p for p, d in PACKAGES.items() if d == dist}
    for folder in folders:
        for top, where in _imports(REPO / folder).items():
            other = PACKAGES.get(top)
            if other is None or top in own:
                continue
            assert other in allowed, f"{where} imports {top} ({other}), outside {dist}'s layer"
            assert other in declared, f"{where} imports {top} but {dist} does not declare {other}"


def test_the_contract_needs_only_the_standard_library() -> None:
    imported = set(_imports(REPO / "platform/contract/src/contract")) - {"contract", "__future__"}
    assert imported <= set(sys.stdlib_module_names), sorted(imported - set(sys.stdlib_module_names))
    assert _declared(_pyprojects()["meridian-contract"]) == set()


# The programs that run in clusters or on laptops: each ships on its own, so none needs another.
CONSUMERS = ("meridian-gkr", "meridian-warden", "meridian-preflight", "meridian-trainer")


def consumers_crossed(layers: dict[str, tuple[tuple[str, ...], set[str]]]) -> list[str]:
    """Each consumer another consumer may depend on, declares or imports (a shared helper belongs in contract
    or telemetry): issue 40 moved the kernel-log parser into contract so Warden no longer needs preflight."""
    crossed = []
    for dist in CONSUMERS:
        others = set(CONSUMERS) - {dist}
        declared = _declared(_pyprojects()[dist])
        imported = {PACKAGES.get(top) for folder in layers[dist][0] for top in _imports(REPO / folder)}
        for kind, found in (("may depend on", layers[dist][1]), ("declares", declared), ("imports", imported)):
            crossed += [f"{dist} {kind} {other}" for other in sorted(others & found)]
    return crossed


def test_no_consumer_depends_on_another() -> None:
    assert consumers_crossed(LAYERS) == []


def test_the_consumer_check_sees_a_crossing() -> None:
    """Warden allowed preflight again: the check names it (the pyproject and import checks run on the files)."""
    folders, allowed = LAYERS["meridian-warden"]
    widened = {**LAYERS, "meridian-warden": (folders, allowed | {"meridian-preflight"})}
    assert consumers_crossed(widened) == ["meridian-warden may depend on meridian-preflight"]


def test_no_component_but_fleet_infra_and_review_imports_fleet() -> None:
    """Issue 17's rule, said plainly: consumers read what fleet generated, never fleet itself."""
    consumers = ("meridian-gkr", "meridian-warden", "meridian-preflight", "meridian-trainer", "meridian-telemetry")
    for dist in (*consumers, "meridian-contract"):
        for folder in LAYERS[dist][0]:
            assert "fleet" not in _imports(REPO / folder), f"{dist} imports fleet"
