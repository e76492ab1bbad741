"""The team scrape stores only the trainer's and the RL controller's families (issue 39: platform series from the platform).

Every pod with a team label is scraped on the trainer's ports, and a team writes whatever its pod serves there. A
research pod serving `warden_leader`, `warden_xids_total` or `kueue_admitted_workloads_total` silenced and raised
the platform's alerts: the team scrape now keeps a series only if its name is one the trainer or the RL controller
exposes (contract.metrics TRAINER and RL, as the client library names them), and drops every other name before
anything is stored. The expositions here are written by the client library pinned in requirements/*.lock.
"""

from __future__ import annotations

import re
from importlib.metadata import version
from typing import Any

import pytest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics

from contract import metrics, names
from contract.metrics import RL, TRAINER
from fleet.gitops.monitoring import scrape, upstream
from telemetry.exposition import render
from telemetry.families import families, registry
from tests.conftest import REPO
from tests.gitops import relabel

TEAM_POD: dict[str, Any] = {
    "metadata": {
        "name": "w-0",
        "namespace": names.team_namespace("research"),
        "labels": {names.TEAM_LABEL: "research", names.JOB_LABEL: "j"},
    },
    "spec": {"nodeName": "gke-h200-a-1"},
}
LOCKS = ("trainer.lock", "warden.lock")


def _exposition(openmetrics_format: bool) -> str:
    """The trainer's and the RL controller's families, every child touched once, as one process serves them."""
    reg = registry()
    found = {**families(TRAINER, reg), **families(RL, reg)}
    for metric, family in found.items():
        labels = dict.fromkeys(metric.labels, "x")
        if metric.kind == "counter":
            family.inc(1, **labels)
        elif metric.kind == "gauge":
            family.set(1, **labels)
        else:
            family.observe(1, **labels)
    if openmetrics_format:
        text: bytes = openmetrics(reg)  # type: ignore[no-untyped-call]
        return text.decode()
    return render(reg)


def _sample_names(text: str) -> set[str]:
    """The series names Prometheus' parser reads off each sample line (`name{labels} value` or `name value`)."""
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    return {re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0) for line in lines}  # type: ignore[union-attr]


def _stored(name: str, **labels: str) -> dict[str, str] | None:
    return relabel.scrape(scrape.trainer(), TEAM_POD, {"__name__": name, **labels})


def test_the_client_library_is_the_one_the_images_pin() -> None:
    """The exposition below is the pinned library's: the trainer's and Warden's images install this version."""
    for lock in LOCKS:
        assert f"prometheus-client=={version('prometheus-client')} " in (REPO / "requirements" / lock).read_text()


@pytest.mark.parametrize("openmetrics_format", [False, True], ids=["text-0.0.4", "openmetrics"])
def test_the_team_scrape_keeps_every_series_the_trainer_and_rl_expose(openmetrics_format: bool) -> None:
    """Counters as `_total`, histograms as `_bucket`/`_sum`/`_count`, no `_created` (telemetry turns it off)."""
    exposed = _sample_names(_exposition(openmetrics_format))
    assert exposed == set(scrape.team_series())
    for name in sorted(exposed):
        stored = _stored(name, run="r", region="us-east4", group="0")
        assert stored is not None, name
        assert stored["namespace"] == TEAM_POD["metadata"]["namespace"]


PLATFORM_NAMES = sorted(
    {s for catalog in (metrics.WARDEN, metrics.PREFLIGHT) for m in catalog for s in m.series()} | upstream.names()
)


@pytest.mark.parametrize("name", PLATFORM_NAMES)
def test_a_team_pod_cannot_store_a_platform_series(name: str) -> None:
    """The attack's series, with the labels a real exporter writes: the team scrape drops each before storage."""
    forged: dict[str, Any] = {"namespace": names.WARDEN_NAMESPACE, "pod": "warden-0", "cluster_queue": "q"}
    assert _stored(name, **forged) is None


@pytest.mark.parametrize("name", ["meridian_trainer_step_total", "meridian_trainer_checkpoint_seconds", "x", ""])
def test_a_near_name_is_not_a_trainer_name(name: str) -> None:
    """The keep is anchored (Prometheus anchors relabel regexes): a prefix or a bare histogram name is not kept."""
    assert _stored(name) is None


def test_the_name_filter_is_generated_from_the_catalog_and_runs_first() -> None:
    rule = scrape.team_names()
    assert rule == {"action": "keep", "sourceLabels": ["__name__"], "regex": "|".join(scrape.team_series())}
    assert all(re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", s) for s in scrape.team_series())  # no regex escaping needed
    for endpoint in scrape.trainer()["spec"]["endpoints"]:
        assert endpoint["metricRelabeling"][0] == rule
