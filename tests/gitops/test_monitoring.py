"""The generated monitoring: every query parses and selects only metrics that exist; the objects validate."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import promql_parser
import pytest

from contract import names
from contract.metrics import RL, WARDEN
from fleet.gitops import kueue
from fleet.gitops.monitoring import monitoring_objects, queries, rules, upstream
from fleet.gitops.monitoring.dashboards import HEALTHY, STATES, boards, dashboard_files, run_board
from fleet.gitops.monitoring.scrape import scrape_objects, trainer
from fleet.gitops.validate import CrdSchemas, validate_object
from fleet.model import Fleet
from tests.gitops import relabel
from warden.state import PHASES

ALERTS = {a.name: a for a in rules.ALERTS}


@pytest.mark.parametrize("name", sorted(ALERTS))
def test_every_alert_query_is_real(name: str) -> None:
    assert queries.problems(ALERTS[name].expr) == []


def test_every_dashboard_query_is_real(fleet: Fleet) -> None:
    found = [p for board in boards(fleet) for q in board.queries for p in queries.problems(q)]
    assert found == []
    assert sum(len(b.queries) for b in boards(fleet)) > 30


def test_the_cross_check_names_the_expression_and_the_unknown_metric() -> None:
    expr = "sum(rate(meridian_trainer_steps_total[5m])) / on () kueue_pending_workloads"
    assert queries.problems(expr) == [f"{expr}: unknown metric meridian_trainer_steps_total"]
    assert queries.problems("sum(rate(up[5m])")[0].endswith("does not parse: unclosed left parenthesis")
    assert "selector without a metric name" in queries.problems('{job="x"}')[0]
    # Histogram series count, the bare histogram name does not: it is never exposed.
    assert queries.problems(f"{rules.CHECKPOINT}_count") == []
    assert queries.problems(rules.CHECKPOINT) == [f"{rules.CHECKPOINT}: unknown metric {rules.CHECKPOINT}"]


def test_every_alert_has_a_runbook_a_summary_and_a_severity() -> None:
    rule = rules.cluster_rules("https://example.com/repo/blob/main")
    entries = rule["spec"]["groups"][0]["rules"]
    assert [e["alert"] for e in entries] == [a.name for a in rules.ALERTS]
    for entry in entries:
        assert len(entry["annotations"][rules.RUNBOOK]) > 80, entry["alert"]
        assert entry["annotations"]["summary"]
        assert entry["labels"]["severity"] in ("critical", "warning")
    assert len(ALERTS) == len(rules.ALERTS)  # unique names


def _binary(expr: str) -> promql_parser.BinaryExpr:
    tree = promql_parser.parse(expr)
    assert isinstance(tree, promql_parser.BinaryExpr)
    return tree


def test_the_stuck_run_alert_joins_the_runs_pods_with_their_phase() -> None:
    """Kubernetes cannot see a stuck collective: a Running pod whose group stopped committing is the signal."""
    tree = _binary(ALERTS["RunStoppedCommitting"].expr)
    assert str(tree.op) == "and"
    matching = tree.modifier.matching if tree.modifier else None
    assert matching is not None
    assert sorted(matching.labels) == ["cluster", "namespace", "pod"]
    assert queries.selected(str(tree.lhs)) == [rules.LAST_COMMIT]
    assert queries.selected(str(tree.rhs)) == ["kube_pod_status_phase"]
    assert 'phase="Running"' in str(tree.rhs)
    # Both sides carry the join's labels: the trainer's scrape keeps the pod's namespace and name.
    assert {"namespace", "pod"} <= set(trainer()["spec"]["targetLabels"]["metadata"])


def test_warden_series_count_only_the_leader() -> None:
    for name in ("WardenBreakerOpen", "NodesHeldForPerson", "GpuXidRateHigh"):
        assert WARDEN.leader.name in queries.selected(ALERTS[name].expr), name


def test_warden_leadership_alerts_cover_none_and_two() -> None:
    """No leader (including no replica reporting at all) and more than one: each an alert with its runbook."""
    none = _binary(ALERTS["WardenNoLeader"].expr)
    assert str(none.op) == "unless"
    assert none.modifier is not None
    assert none.modifier.matching is not None
    assert list(none.modifier.matching.labels) == ["cluster"]
    # A cluster is there whether Warden is: a platform target's `up`, or kube-state-metrics' view of kube-system.
    assert queries.selected(str(none.lhs)) == ["up", "kube_pod_status_phase"]
    assert queries.selected(str(none.rhs)) == [WARDEN.leader.name]
    two = _binary(ALERTS["WardenSplitLeadership"].expr)
    assert queries.selected(str(two.lhs)) == [WARDEN.leader.name]
    assert str(two.rhs) == "1"
    assert all(ALERTS[a].severity == "critical" for a in ("WardenNoLeader", "WardenSplitLeadership"))


def test_monitoring_objects_validate_against_the_pinned_gmp_crds(crds: CrdSchemas, fleet: Fleet) -> None:
    objects = monitoring_objects("https://example.com/repo/blob/main")
    kinds = {o["kind"] for o in objects}
    assert {"ClusterPodMonitoring", "PodMonitoring", "ClusterRules"} <= kinds
    for o in objects:
        assert validate_object(o, fleet.versions.kubernetes, crds) == [], o["metadata"]["name"]
    broken = copy.deepcopy(next(o for o in objects if o["kind"] == "ClusterRules"))
    broken["spec"]["groups"][0]["rules"][0]["severity"] = "critical"  # belongs under labels
    assert any("'severity' was unexpected" in p for p in validate_object(broken, fleet.versions.kubernetes, crds))


def test_the_trainer_is_scraped_on_the_contract_port_in_every_team_namespace() -> None:
    spec = trainer()["spec"]
    # Every group of a node on its own port under Ray (trainer.launch.ray_supervisor): each slot is scraped.
    assert [e["port"] for e in spec["endpoints"]] == list(names.TRAINER_METRICS_PORTS)
    assert {"key": names.TEAM_LABEL, "operator": "Exists"} in spec["selector"]["matchExpressions"]


def test_kueue_reports_queue_usage_and_quota() -> None:
    """The fleet dashboard and the Kueue dashboard read the per-queue resource gauges, off by default."""
    assert kueue.manager_config()["metrics"]["enableClusterQueueResources"] is True


def test_upstream_lists_name_their_version_and_source(fleet: Fleet) -> None:
    exporters = {e.name: e for e in upstream.exporters()}
    assert {"kueue", "kuberay", "dcgm", "kube-state-metrics"} <= set(exporters)
    assert exporters["kueue"].version == f"v{fleet.versions.kueue}"
    assert exporters["kuberay"].version == f"v{fleet.versions.kuberay}"
    for exporter in exporters.values():
        assert exporter.source.startswith("https://"), exporter.name
        assert exporter.names, exporter.name


def test_the_fleet_dashboard_groups_wardens_real_phases() -> None:
    grouped = [p for phases in STATES.values() for p in phases] + [HEALTHY]
    assert sorted(grouped) == sorted(PHASES)


def test_dashboards_are_built_by_the_sdk_and_templated(fleet: Fleet) -> None:
    files = dashboard_files(fleet)
    assert sorted(files) == ["meridian-fleet.json", "meridian-kueue.json", "meridian-run.json", "meridian-warden.json"]
    for name, text in files.items():
        board = json.loads(text)
        assert f"{board['uid']}.json" == name
        variables = {v["name"] for v in board["templating"]["list"]}
        assert "datasource" in variables
        panels = [p for p in board["panels"] if p["type"] != "row"]
        assert panels, name
        assert all(p["datasource"]["uid"] == "${datasource}" for p in panels), name
    run = json.loads(files["meridian-run.json"])
    assert "run" in {v["name"] for v in run["templating"]["list"]}
    exprs = [t["expr"] for p in run["panels"] if p["type"] != "row" for t in p["targets"]]
    assert all('run=~"$run"' in e for e in exprs)


def test_the_run_board_shows_every_rl_metric() -> None:
    """The RL row reads each metric of contract.metrics.RL (a series of it: a histogram's _bucket or _sum)."""
    selected = {name for q in run_board().queries for name in queries.selected(q)}
    assert [m.name for m in RL if not selected & set(m.series())] == []


def _every_query(fleet: Fleet) -> list[str]:
    return [a.expr for a in rules.ALERTS] + [q for board in boards(fleet) for q in board.queries]


def test_every_query_that_keys_on_run_keys_on_its_namespace_too(fleet: Fleet) -> None:
    """A run's name is its team's choice: another team's run of the same name must never merge with it or page it."""
    exprs = _every_query(fleet)
    assert sum(bool(re.search(r"\brun\b", e)) for e in exprs) > 10
    assert [p for e in exprs for p in queries.run_scoping(e)] == []


def test_the_run_scoping_check_names_what_merges_runs() -> None:
    assert queries.run_scoping('sum by (cluster, namespace, run) (x{namespace=~"a", run=~"b"})') == []
    assert queries.run_scoping("sum by (cluster) (x)") == []
    for bad in (
        "sum by (cluster, run) (x)",
        "sum without (namespace) (x)",
        "x / on (cluster, run) y",
        "x / ignoring (namespace) y",
        'x{run="llama"}',
    ):
        assert len(queries.run_scoping(bad)) == 1, bad


def _trainer_pod(namespace: str, team_label: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "llama-worker-0",
            "namespace": namespace,
            "labels": {names.TEAM_LABEL: team_label, names.JOB_LABEL: "llama"},
        },
        "spec": {"nodeName": "gke-h200-a-1"},
    }


def _commit_series(**labels: str) -> dict[str, str]:
    return {"__name__": rules.LAST_COMMIT, "run": "llama", "region": "us-central1", "group": "0", **labels}


def test_a_pod_cannot_claim_another_teams_metrics() -> None:
    """evals' pod says it is pretraining's, in its pod labels and its series' labels: the series stays evals'."""
    forged = _commit_series(team="pretraining", namespace="team-pretraining", pod="pretraining-worker-0")
    stored = relabel.scrape(trainer(), _trainer_pod(names.team_namespace("evals"), "pretraining"), forged)
    assert stored is not None
    assert stored["team"] == "evals"
    assert stored["namespace"] == names.team_namespace("evals")
    assert stored["pod"] == "llama-worker-0"
    assert not [k for k, v in stored.items() if "pretraining" in v], stored  # no exported_* copy of the claim
    # The honest pod of the same run name is a different series: the alerts and the run dashboard key on both.
    honest = relabel.scrape(
        trainer(), _trainer_pod(names.team_namespace("pretraining"), "pretraining"), _commit_series()
    )
    assert honest is not None
    assert (honest["namespace"], honest["team"]) == ("team-pretraining", "pretraining")
    assert (honest["namespace"], honest["run"]) != (stored["namespace"], stored["run"])


def test_a_team_label_outside_a_team_namespace_is_not_a_team() -> None:
    pod = _trainer_pod("default", "pretraining")
    assert relabel.scrape(trainer(), pod, _commit_series(team="pretraining")) is None


def test_the_relabel_interpreter_follows_prometheus() -> None:
    rule = {"sourceLabels": ["a", "b"], "regex": "x-(.*);(.+)", "targetLabel": "c", "replacement": "${1}/$2"}
    assert relabel.apply([rule], {"a": "x-1", "b": "2"}) == {"a": "x-1", "b": "2", "c": "1/2"}
    assert relabel.apply([rule], {"a": "y-1", "b": "2", "c": "kept"})["c"] == "kept"  # type: ignore[index]
    assert relabel.apply([{"action": "keep", "sourceLabels": ["a"], "regex": "x"}], {"a": "xx"}) is None  # anchored
    assert relabel.apply([{"action": "labeldrop", "regex": "exported_.+"}], {"exported_a": "1", "a": "2"}) == {"a": "2"}
    monitoring = {"kind": "PodMonitoring", "metadata": {"name": "m"}, "spec": {"endpoints": [{"port": 1}]}}
    pod = {"metadata": {"name": "p", "namespace": "n"}}
    assert relabel.scrape(monitoring, pod, {"__name__": "x", "namespace": "forged", "job": "j"}) == {
        "__name__": "x",
        "exported_namespace": "forged",
        "exported_job": "j",
        "namespace": "n",
        "job": "m",
        "instance": "p:1",
        "project_id": "p",
        "location": "l",
        "cluster": "c",
    }


def test_the_scrape_relabelling_is_what_gmp_accepts() -> None:
    """prometheus-engine v0.17.2 pod_config.go convertRelabelingRule: no rule writes or drops a protected label."""
    for o in scrape_objects():
        if o["kind"] not in ("PodMonitoring", "ClusterPodMonitoring"):
            continue
        for endpoint in o["spec"]["endpoints"]:
            for rule in endpoint.get("metricRelabeling", []):
                action = rule.get("action", "replace")
                assert action in ("replace", "keep", "drop", "labeldrop"), rule
                if action == "replace":
                    assert rule["targetLabel"] not in relabel.PROTECTED, rule
                if action == "labeldrop":
                    assert not [p for p in relabel.PROTECTED if re.fullmatch(rule["regex"], p)], rule
