"""One Prometheus exposition helper (telemetry) and each metric's name spelled once (contract/metrics.py).

Issue 29: the helper used to live in preflight, so Warden and the trainer depended on it; a second helper or
a second spelling of a metric's name is how a component's metrics drift from the catalog its dashboards,
alerts and README read. The shipped code is read as syntax (every import, every string constant but
docstrings), so an import inside a function counts, and so does a name inside a PromQL string or an
f-string's literal part.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from contract.metrics import ALL, CATALOGS, TRAINER, WARDEN, Catalog, Metric
from tests.conftest import REPO

TELEMETRY = REPO / "platform/telemetry/src/telemetry"
CATALOG = REPO / "platform/contract/src/contract/metrics.py"


def _shipped() -> list[Path]:
    """Every Python file that ships or runs the platform: the components' sources, infra, scripts."""
    roots = [*sorted(REPO.glob("platform/*/src")), REPO / "infra", REPO / "scripts"]
    return sorted(p for root in roots for p in root.rglob("*.py") if "cdktf.out" not in p.parts)


def _tree(path: Path) -> ast.AST:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _imports_prometheus(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "prometheus_client" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "prometheus_client":
            return True
    return False


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring constants: prose may name a metric, as the READMEs do."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _spelled(tree: ast.AST, names: set[str]) -> set[str]:
    """The names found in the string constants of `tree`, whole (a series suffix allowed), docstrings aside."""
    alternatives = "|".join(sorted(map(re.escape, names), key=len, reverse=True))
    # A metric name's characters (letters, digits, _ and :) must not continue it on either side.
    token = re.compile(rf"(?<![A-Za-z0-9_:])({alternatives})(?:_bucket|_sum|_count)?(?![A-Za-z0-9_:])")
    docs = _docstrings(tree)
    return {
        m.group(1)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
        for m in token.finditer(n.value)
    }


def test_there_is_shipped_code_to_read() -> None:
    files = _shipped()
    assert TELEMETRY / "families.py" in files
    assert REPO / "platform/trainer/src/trainer/observe/metrics.py" in files
    assert len(files) > 100


def test_only_telemetry_imports_the_prometheus_client() -> None:
    importing = {p for p in _shipped() if _imports_prometheus(_tree(p))}
    assert importing, "telemetry builds the collectors with the client library"
    outside = sorted(str(p.relative_to(REPO)) for p in importing if not p.is_relative_to(TELEMETRY))
    assert not outside, f"{outside} import prometheus_client; use telemetry.families and telemetry.exposition"


def test_no_metric_name_is_spelled_outside_the_catalog() -> None:
    names = {m.name for m in ALL}
    again = {
        str(p.relative_to(REPO)): sorted(found)
        for p in _shipped()
        if p != CATALOG and (found := _spelled(_tree(p), names))
    }
    assert not again, f"metric names spelled again: {again}; use the catalog's attribute (TRAINER.step.name)"


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    """The two checks above would pass on an empty tree: show they catch each kind of second copy."""
    wanted = {TRAINER.step.name, TRAINER.checkpoint_seconds.name, WARDEN.xids.name, WARDEN.leader.name}
    source = (
        "def f(pool):\n"
        f'    """{WARDEN.leader.name} in prose is fine."""\n'
        "    from prometheus_client.parser import text_string_to_metric_families\n"
        f"    return f'rate({WARDEN.xids.name}{{{{pool={{pool}}}}}}[5m])', '{TRAINER.step.name}',"
        f" 'p95({TRAINER.checkpoint_seconds.name}_bucket)'\n"
    )
    tree = ast.parse(source)
    assert _imports_prometheus(tree)
    assert _spelled(tree, wanted) == wanted - {WARDEN.leader.name}
    assert _imports_prometheus(ast.parse("import prometheus_client.parser as p"))
    assert _spelled(ast.parse(f"x = '{TRAINER.step.name}_total'"), wanted) == set()  # another name, not this one


@pytest.mark.parametrize("catalog", CATALOGS, ids=lambda c: type(c).__name__)
def test_a_catalog_is_its_attributes_in_order(catalog: Catalog) -> None:
    metrics = list(catalog)
    assert metrics == [getattr(catalog, attribute) for attribute, _ in catalog.items()]
    assert len(catalog) == len(metrics) == len({m.name for m in metrics})
    assert all(isinstance(m, Metric) for m in metrics)


def test_names_are_unique_across_the_catalogs() -> None:
    assert len({m.name for m in ALL}) == len(ALL) == sum(len(c) for c in CATALOGS)


def test_the_ray_version_gkr_declares_is_the_one_the_images_install() -> None:
    """spec.rayVersion picks KubeRay's probes; it must be the Ray of requirements/dev.lock (and so of every image)."""
    from contract import names

    lock = (REPO / "requirements/dev.lock").read_text()
    assert f"\nray=={names.RAY_VERSION} " in lock
