"""NCCL failure Events: the exact request a replica group posts for Warden, against a local server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from trainer.ft.kube_events import FailureReporter

from contract import names
from tests.warden.fakes import ApiState, FakeApiServer, serving
from warden.trust import Verdicts, nccl_failures

ENV = {"NODE_NAME": "gke-h200-a-0007", "POD_NAME": "pretrain-worker-3", "POD_NAMESPACE": "team-research"}


@pytest.fixture
def api() -> Iterator[tuple[ApiState, str]]:
    state = ApiState()
    with serving(FakeApiServer, state) as url:
        yield state, url


def account(tmp_path: Path) -> Path:
    (tmp_path / "token").write_text("trainer-token\n")
    return tmp_path


def test_a_failure_becomes_an_event_warden_counts_for_the_node(api: tuple[ApiState, str], tmp_path: Path) -> None:
    state, url = api
    reporter = FailureReporter(ENV, account(tmp_path), interval_s=30, api=url)
    assert reporter.report("collective failed at step 41: Connection reset by peer", now=1_764_400_000)
    (request,) = state.requests
    assert (request.method, request.path) == ("POST", "/api/v1/namespaces/team-research/events")
    assert (request.auth, request.content_type) == ("Bearer trainer-token", "application/json")
    assert request.body["reason"] == names.NCCL_FAILURE_REASON
    assert request.body["source"] == {"component": "meridian-trainer", "host": "gke-h200-a-0007"}
    assert request.body["involvedObject"]["name"] == "pretrain-worker-3"
    # Rate-limited: a second failure 10 s later is not posted, one 40 s later is.
    assert not reporter.report("again", now=1_764_400_010)
    assert reporter.report("again", now=1_764_400_040)
    # Warden counts the pod once, after checking it runs on the node the Event names.
    pod = {
        "metadata": {"name": "pretrain-worker-3", "namespace": "team-research"},
        "spec": {"nodeName": ENV["NODE_NAME"]},
    }
    verdicts = Verdicts()
    nccl_failures(
        state.events,
        lambda ns, name: pod if (ns, name) == (ENV["POD_NAMESPACE"], ENV["POD_NAME"]) else None,
        1_764_400_060,
        3600,
        verdicts,
    )
    assert verdicts.nccl == {("gke-h200-a-0007", "team-research"): 1}  # per node and asking namespace
    assert not verdicts.ignored


def test_outside_a_cluster_nothing_is_sent(tmp_path: Path) -> None:
    assert not FailureReporter({}, account(tmp_path)).enabled
    assert not FailureReporter(ENV, tmp_path / "missing", api="http://127.0.0.1:9").enabled
    assert not FailureReporter({}, account(tmp_path)).report("x")


def test_an_unreachable_api_server_does_not_stop_training(tmp_path: Path) -> None:
    reporter = FailureReporter(ENV, account(tmp_path), api="http://127.0.0.1:9")
    assert reporter.report("x") is False
