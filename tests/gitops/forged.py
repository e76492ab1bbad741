"""Forged team series for an alert's promtool test: a team pod that replays the platform's series it sees in the test.

The attacker (issue 39): a pod of team `forger`, in every cluster of the test, serves on the trainer's port a copy of
each platform series of the alert's test (anything the team's own families do not name: Warden's, Kueue's,
kube-state-metrics', `up`), with the label values of one "world" of the test (the values of the labels the alert
keeps: its cluster, pool, ClusterQueue) moved onto every other world and onto its own. Replaying the world where
Warden leads into a leaderless cluster is the silencing attack; replaying a world that fires into a quiet one is
the raising attack; replaying a world onto itself doubles what the alert counts.

The copies are stored as the team scrape stores them (tests/gitops/relabel.py: target labels forced, `exported_*`
dropped) but without the scrape's name filter, so the rules themselves are what is tested: a rule that selects its
series by the exporter's namespace ignores them; a rule that does not is changed by them (test_alert_rules shows
both).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

import promql_parser

from contract import names
from fleet.gitops.monitoring import scrape
from tests.gitops import relabel

FORGER = "forger"
NAMESPACE = names.team_namespace(FORGER)
Labels = dict[str, str]


def parse(series: str) -> tuple[str, Labels]:
    """A promtool series (`name{a="b"}`) as its name and labels."""
    node = promql_parser.parse(series)
    assert isinstance(node, promql_parser.VectorSelector), series
    return str(node.name), {m.name: m.value for m in node.matchers.matchers}


def text(name: str, labels: Labels) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def team_scrape_without_name_filter() -> dict[str, Any]:
    """The trainer's ClusterPodMonitoring with its `__name__` keep removed: what the rules face if a name got in."""
    monitoring = copy.deepcopy(scrape.trainer())
    for endpoint in monitoring["spec"]["endpoints"]:
        endpoint["metricRelabeling"] = [r for r in endpoint["metricRelabeling"] if r != scrape.team_names()]
    return monitoring


def stored(name: str, exposed: Labels, pod: str, cluster: str) -> Labels | None:
    """`name{exposed}` served by the forger's pod `pod` in `cluster`, as the team scrape (no name filter) stores it."""
    team_pod = {
        "metadata": {
            "name": pod,
            "namespace": NAMESPACE,
            "labels": {names.TEAM_LABEL: FORGER, names.JOB_LABEL: "forged"},
        },
        "spec": {"nodeName": "gke-h200-a-1"},
    }
    out = relabel.scrape(team_scrape_without_name_filter(), team_pod, {"__name__": name, **exposed}, cluster)
    if out is None:
        return None
    return {k: v for k, v in out.items() if k != "__name__"}


# Labels a team pod cannot choose: the scrape forces them (relabel.target_labels); a world is moved only by the rest.
FORCED = ("project_id", "location", "namespace", "job", "instance", "pod", "node", scrape.TEAM, scrape.JOB)


def _worlds(series: list[tuple[str, Labels, str]], keys: list[str]) -> list[Labels]:
    found = {tuple(labels[k] for k in keys) for _, labels, _ in series if all(k in labels for k in keys)}
    return [dict(zip(keys, values, strict=True)) for values in sorted(found)]


def _replay(
    series: list[tuple[str, Labels, str]], keys: list[str], src: Labels, dst: Labels, tag: str
) -> dict[str, str]:
    """The series of world `src` (those that agree with it on every key they carry) with `dst`'s key values."""
    out: dict[str, str] = {}
    for name, labels, values in series:
        if any(labels.get(k, src[k]) != src[k] for k in keys):
            continue
        exposed = {k: (dst[k] if k in keys else v) for k, v in labels.items() if k != "cluster"}
        pod = f"{labels.get('pod', 'exporter')}-{tag}"
        forged = stored(name, exposed, pod, dst["cluster"])
        if forged is not None:
            out[text(name, forged)] = values
    return out


def forged_series(
    input_series: Iterable[dict[str, str]], keeps: Iterable[str], platform: Callable[[str], bool]
) -> list[dict[str, str]]:
    """The forged input series for one promtool test group: every world replayed onto every world.

    `keeps`: the labels the alert's result carries (queries.alert_labels): they tell its worlds apart.
    `platform`: whether a metric name is one a team's own families do not export.
    """
    series = [(*parse(s["series"]), s["values"]) for s in input_series]
    ours = [(n, labels, v) for n, labels, v in series if platform(n)]
    assert all(labels.get("namespace") != NAMESPACE for _, labels, _ in series), f"{NAMESPACE} is the forger's"
    keys = sorted({"cluster", *keeps} - set(FORCED))
    out: dict[str, str] = {}
    worlds = _worlds(series, keys)  # the team's own series tell worlds apart too (a run's group)
    for i, src in enumerate(worlds):
        for j, dst in enumerate(worlds):
            out |= _replay(ours, keys, src, dst, f"{i}-{j}")
    return [{"series": s, "values": v} for s, v in sorted(out.items())]


def with_forged(
    test: dict[str, Any], keeps: Iterable[str], platform: Callable[[str], bool]
) -> tuple[dict[str, Any], int]:
    """`test` (a promtool test file) with the forged series added to each group; and how many were added."""
    out = copy.deepcopy(test)
    added = 0
    for group in out["tests"]:
        forged = forged_series(group["input_series"], keeps, platform)
        group["input_series"] = [*group["input_series"], *forged]
        added += len(forged)
    return out, added
