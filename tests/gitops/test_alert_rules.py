"""Every alert evaluated by Prometheus' own rule engine: `promtool test rules` on synthetic series.

The rules are the rendered ones (the committed `monitoring` overlay's ClusterRules), written out as a
Prometheus rule file; each alert has a test file in tests/gitops/alerts/ (see its README) in which it
fires when it should and stays silent when it should not. promtool comes from the OS's `prometheus`
package (.ci/run installs it); without it these tests are skipped with that reason on a developer's
machine, and `make test` says so in one line. In CI (`CI` set) they are never skipped: a promtool CI could
not install fails them, so an alert rule is never landed unevaluated.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml

from contract import names
from contract.metrics import WARDEN
from fleet.gitops.monitoring import queries, rules, scrape, upstream
from fleet.model import Fleet
from tests.conftest import REPO
from tests.gitops import forged

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


def promtool(groups: list[dict[str, Any]], test: dict[str, Any], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`promtool test rules` of `test` (a test file's content) on `groups`, after `promtool check rules`."""
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    check = subprocess.run(
        [str(PROMTOOL), "check", "rules", "rules.yaml"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(with_fixed_annotations(test, fixed_annotations(groups))))
    return subprocess.run(
        [str(PROMTOOL), "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True, check=False
    )


def alert_test(name: str) -> dict[str, Any]:
    test: dict[str, Any] = yaml.safe_load((ALERT_TESTS / f"{name}.test.yaml").read_text())
    return test


@needs_promtool
@pytest.mark.parametrize("name", sorted(a.name for a in rules.ALERTS))
def test_alert_fires_when_it_should_and_only_then(name: str, tmp_path: Path) -> None:
    result = promtool(rendered_groups(), alert_test(name), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


# Issue 39: a team's pod served warden_leader, warden_xids_total and kueue_admitted_workloads_total, and silenced or
# raised platform alerts. A platform alert is one that reads a series no team family exports (scrape.team_series).
def platform(metric: str) -> bool:
    return metric not in scrape.team_series()


ALERTS = {a.name: a for a in rules.ALERTS}
PLATFORM_ALERTS = sorted(n for n, a in ALERTS.items() if any(platform(m) for m in queries.selected(a.expr)))


def forged_test(name: str) -> tuple[dict[str, Any], int]:
    keeps = queries.alert_labels(ALERTS[name].expr) or frozenset()
    return forged.with_forged(alert_test(name), keeps, platform)


def test_every_alert_reads_the_platform_or_only_its_own_teams_runs() -> None:
    """An alert on team series alone is the team's (its result keeps `namespace`); every other one is forged below."""
    assert {"WardenNoLeader", "WardenSplitLeadership", "GpuXidRateHigh", "WorkloadsPendingLong"} <= set(PLATFORM_ALERTS)
    for name in sorted(set(ALERTS) - set(PLATFORM_ALERTS)):
        assert "namespace" in (queries.alert_labels(ALERTS[name].expr) or ()), name


@needs_promtool
@pytest.mark.parametrize("name", PLATFORM_ALERTS)
def test_a_teams_forged_series_neither_silence_nor_raise_a_platform_alert(name: str, tmp_path: Path) -> None:
    """Each of the alert's own cases, with a team's replay of every platform series in it: the same alerts fire."""
    test, added = forged_test(name)
    assert added > 0, f"{name}: its test has no platform series a team could forge"
    result = promtool(rendered_groups(), test, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


NAMESPACE_MATCHER = re.compile(r'namespace=~?"[^"]*",?\s*')


def unscoped(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rules without their `namespace` matchers: what they were before issue 39."""
    out = copy.deepcopy(groups)
    for rule in (r for g in out for r in g["rules"]):
        rule["expr"] = re.sub(r",\s*}", "}", NAMESPACE_MATCHER.sub("", rule["expr"])).replace("{}", "")
    return out


@needs_promtool
@pytest.mark.parametrize("name", [n for n in PLATFORM_ALERTS if NAMESPACE_MATCHER.search(ALERTS[n].expr)])
def test_the_forged_series_would_change_the_alert_without_its_namespace_selectors(name: str, tmp_path: Path) -> None:
    """The forgery above is not idle: the same rule selecting by name alone is silenced, raised or miscounted."""
    test, _ = forged_test(name)
    result = promtool(unscoped(rendered_groups()), test, tmp_path)
    assert result.returncode != 0
    assert "got:" in result.stdout + result.stderr, result.stderr  # other alerts than expected, not a rule error


def _names_of(exporter: str) -> frozenset[str]:
    return next(e.names for e in upstream.exporters() if e.name == exporter)


# Where each platform family's exporter runs: the namespace its PodMonitoring (scrape.py) stores it under.
EXPORTER_NAMESPACE = {
    **{s: names.WARDEN_NAMESPACE for m in WARDEN for s in m.series()},
    **dict.fromkeys(_names_of("kueue"), scrape.KUEUE_NAMESPACE),
    **dict.fromkeys(_names_of("kuberay"), scrape.KUBERAY_NAMESPACE),
}


def _selectors(expr: str) -> list[promql_parser.VectorSelector]:
    found: list[promql_parser.VectorSelector] = []

    def visit(node: object) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            found.append(node)
        return True

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


def _namespaces(selector: promql_parser.VectorSelector) -> set[str] | None:
    """The namespaces a selector's `namespace` matcher admits (an alternation of names); None without one."""
    for m in selector.matchers.matchers:
        if m.name == "namespace" and m.op == promql_parser.MatchOp.Equal:
            return {m.value}
        if m.name == "namespace" and m.op == promql_parser.MatchOp.Re and re.fullmatch(r"[a-z0-9|-]+", m.value):
            return set(m.value.split("|"))
    return None


def test_every_platform_selector_names_its_exporters_namespace() -> None:
    """Issue 39 item 2, for every rule now and later: a platform series is read only where its exporter runs.

    kube-state-metrics' `namespace` is the described pod's: a selector of it names a platform namespace, or the
    alert keeps `namespace` (it joins the team's own series, so a team's forgery only reaches its own runs).
    """
    for alert in rules.ALERTS:
        for selector in _selectors(alert.expr):
            name, found = str(selector.name), _namespaces(selector)
            if not platform(name):
                continue
            where = f"{alert.name}: {selector}"
            if name in EXPORTER_NAMESPACE:
                assert found == {EXPORTER_NAMESPACE[name]}, where
            elif name == "up":
                assert found is not None, where
                assert found <= set(scrape.PLATFORM_NAMESPACES), where
            elif name in _names_of("kube-state-metrics") and found is None:
                assert "namespace" in (queries.alert_labels(alert.expr) or ()), where
            else:  # kube-state-metrics' view of a platform namespace; an exporter not placed above must be first
                assert found is not None, where
                assert found <= {*scrape.PLATFORM_NAMESPACES, rules.KUBE_SYSTEM}, where
