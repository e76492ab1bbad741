"""Every alert evaluated by Prometheus' own rule engine: `promtool test rules` on synthetic series.

The rules are the rendered ones (the committed `monitoring` overlay's ClusterRules), written out as a
Prometheus rule file; each alert has a test file in tests/gitops/alerts/ (see its README) in which it
fires when it should and stays silent when it should not. promtool comes from the OS's `prometheus`
package (.ci/run installs it); without it these tests are skipped with that reason on a developer's
machine, and `make test` says so in one line. In CI (`CI` set) they are never skipped: a promtool CI could
not install fails them, so an alert rule is never landed unevaluated.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.gitops.monitoring import rules
from fleet.model import Fleet
from tests.conftest import REPO

ALERT_TESTS = REPO / "tests" / "gitops" / "alerts"
RENDERED = REPO / "kustomize" / "overlays" / "meridian-us-east4" / "monitoring" / "monitoring.yaml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None and not os.environ.get("CI"),
    reason="alert rules not evaluated: promtool is absent (apt-get install prometheus)",
)


def rendered_groups() -> list[dict[str, Any]]:
    found = [o for o in yaml.safe_load_all(RENDERED.read_text()) if o and o.get("kind") == "ClusterRules"]
    assert len(found) == 1, f"{RENDERED}: expected one ClusterRules object"
    groups: list[dict[str, Any]] = found[0]["spec"]["groups"]
    return groups


def fixed_annotations(groups: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Alert -> its annotations without a template: the same on every alert, so the tests need not spell them."""
    return {
        r["alert"]: {k: v for k, v in r.get("annotations", {}).items() if "{{" not in v}
        for g in groups
        for r in g["rules"]
    }


def with_fixed_annotations(test: dict[str, Any], fixed: dict[str, dict[str, str]]) -> dict[str, Any]:
    for case in test["tests"]:
        for check in case.get("alert_rule_test", []):
            for alert in check.get("exp_alerts") or []:
                alert["exp_annotations"] = {**fixed[check["alertname"]], **alert.get("exp_annotations", {})}
    return test


def test_every_alert_has_a_rule_test() -> None:
    names = {a.name for a in rules.ALERTS}
    files = {p.name.removesuffix(".test.yaml") for p in ALERT_TESTS.glob("*.test.yaml")}
    assert files == names
    for name in names:  # each test watches its alert fire, and watches it stay silent
        checks = [
            c
            for t in yaml.safe_load((ALERT_TESTS / f"{name}.test.yaml").read_text())["tests"]
            for c in t["alert_rule_test"]
        ]
        assert {c["alertname"] for c in checks} == {name}
        assert any(c.get("exp_alerts") for c in checks), name
        assert any(not c.get("exp_alerts") for c in checks), name


def test_the_rendered_rules_are_the_generators(fleet: Fleet) -> None:
    docs = rules.docs_url(fleet.gitops.repo, fleet.gitops.revision)
    assert rendered_groups() == rules.cluster_rules(docs)["spec"]["groups"]


def test_every_alert_links_its_runbook_page(fleet: Fleet) -> None:
    for rule in rendered_groups()[0]["rules"]:
        url = rule["annotations"][rules.RUNBOOK_URL]
        page = f"{rules.RUNBOOKS}/{rule['alert']}.md"
        assert url == f"https://github.com/meridian-ml/meridian/blob/main/{page}"
        assert (REPO / page).is_file(), page


@needs_promtool
@pytest.mark.parametrize("name", sorted(a.name for a in rules.ALERTS))
def test_alert_fires_when_it_should_and_only_then(name: str, tmp_path: Path) -> None:
    groups = rendered_groups()
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    check = subprocess.run(
        [str(PROMTOOL), "check", "rules", "rules.yaml"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
    test = yaml.safe_load((ALERT_TESTS / f"{name}.test.yaml").read_text())
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(with_fixed_annotations(test, fixed_annotations(groups))))
    result = subprocess.run(
        [str(PROMTOOL), "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
