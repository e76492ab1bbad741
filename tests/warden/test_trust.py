"""Tenants' reports Warden trusts only as far as the cluster attests them (issue 14), against the local API server.

What passes is still only a request to verify the node (issue 27, tests/warden/test_verification.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from contract import health
from preflight.report import Result, termination_message
from tests.warden.fakes import ApiState, ComputeState, FakeApiServer, FakeCompute, node, pod, serving
from tests.warden.test_kube import POLICY, Cluster, nccl_event, record_of
from tests.warden.test_sweeps import warden
from warden.trust import Verdicts, nccl_failures, preflight_failures

NOW = 1_764_403_200.0  # 2025-11-29T08:00:00Z
POLICY_ONE = replace(POLICY, nccl_failures=1, unhealthy_share_limit=0.5)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    api, gce = ApiState(), ComputeState()
    with serving(FakeApiServer, api) as url, serving(FakeCompute, gce) as gce_url:
        yield Cluster(api, gce, url, gce_url)


def gpu_nodes(c: Cluster, count: int = 10) -> None:
    c.api.nodes = {f"n-{i:02d}": node(f"n-{i:02d}") for i in range(count)}
    c.clock.now = NOW


def test_a_forged_event_naming_another_node_is_not_counted(cluster: Cluster) -> None:
    gpu_nodes(cluster)
    cluster.api.pods = [pod("attacker-0", "n-01"), pod("victim-0", "n-02", namespace="team-b")]
    cluster.api.events = [
        nccl_event("attacker-0", "n-03"),  # a real pod, but on n-01, naming n-03
        nccl_event("ghost", "n-04"),  # no such pod
        nccl_event(
            "victim-0",
            "n-02",
            namespace="research",
            involvedObject={  # another namespace's pod
                "kind": "Pod",
                "name": "victim-0",
                "namespace": "team-b",
            },
        ),
        nccl_event(
            "attacker-0",
            "n-01",
            involvedObject={  # the right name, another pod's uid
                "kind": "Pod",
                "name": "attacker-0",
                "namespace": "research",
                "uid": "uid-stale",
            },
        ),
        {
            "reason": "NCCLFailure",
            "source": "n-05",
            "involvedObject": ["garbage"],
            "lastTimestamp": "2025-11-29T07:59:00Z",
        },  # hostile shapes
    ]
    warden = cluster.warden(POLICY_ONE)
    warden.round()
    assert all(record_of(cluster, n).phase == "healthy" for n in cluster.api.nodes)
    ignored = warden.metrics.ignored
    assert ignored.get(reason="nccl_wrong_node") == 1
    assert ignored.get(reason="nccl_no_such_pod") == 1
    assert ignored.get(reason="nccl_other_namespace") == 1
    assert ignored.get(reason="nccl_other_pod") == 1
    assert ignored.get(reason="nccl_malformed") == 1
    assert "warden_signals_ignored_total" in warden.metrics.render()
    # Warden asked the API server for the pods the Events named, in their namespaces.
    gets = {r.path for r in cluster.api.requests if r.method == "GET" and "/namespaces/" in r.path}
    assert gets == {"/api/v1/namespaces/research/pods/attacker-0", "/api/v1/namespaces/research/pods/ghost"}


def verifications(c: Cluster) -> list[str]:
    return sorted(j["metadata"]["labels"]["meridian.dev/deep-check-node"] for j in c.api.jobs.values())


def test_count_100_from_one_pod_counts_once(cluster: Cluster) -> None:
    gpu_nodes(cluster)
    cluster.api.pods = [pod("w-0", "n-01")]
    cluster.api.events = [nccl_event("w-0", "n-01", count=100), nccl_event("w-0", "n-01", count=100)]
    verdicts = Verdicts()
    nccl_failures(cluster.api.events, lambda ns, name: cluster.kube().pod(ns, name), NOW, 3600, verdicts)
    assert verdicts.nccl == {("n-01", "research"): 1}
    warden(cluster, replace(POLICY, unhealthy_share_limit=0.5)).round()  # threshold 3: one pod is not enough
    assert verifications(cluster) == []
    warden(cluster, POLICY_ONE).round()  # a real pod on its own node asks for a check, no more
    assert verifications(cluster) == ["n-01"]
    assert record_of(cluster, "n-01").phase == "healthy"


def preflight_pod(name: str, node_name: str, message: str, exit_code: int = 1) -> dict[str, Any]:
    terminated = {"exitCode": exit_code, "finishedAt": "2025-11-29T07:58:00Z", "message": message}
    return pod(
        name,
        node_name,
        metadata={"labels": {"meridian.dev/team": "research"}},
        status={
            "phase": "Failed",
            "initContainerStatuses": [{"name": "preflight", "state": {"terminated": terminated}}],
        },
    )


MESSAGE = termination_message([Result("gpu-state", "fail", "GPU 1: ECC", [], 1)], NOW - 120) or ""


def test_a_failed_preflight_init_container_asks_for_a_check_of_its_node_without_a_node_patch(cluster: Cluster) -> None:
    gpu_nodes(cluster)
    cluster.api.pods = [
        preflight_pod("job-a-0", "n-01", MESSAGE),
        preflight_pod("job-b-0", "n-02", "Traceback: not preflight's JSON"),  # logs fallback, or a forgery
        preflight_pod("job-c-0", "n-03", MESSAGE, exit_code=0),  # passed
        preflight_pod("job-d-0", "", MESSAGE),  # never bound: names no node
    ]
    w = warden(cluster, replace(POLICY, unhealthy_share_limit=0.5))
    w.round()
    assert verifications(cluster) == ["n-01"]
    assert [record_of(cluster, n).phase for n in ("n-01", "n-02", "n-03")] == ["healthy"] * 3
    assert w.metrics.ignored.get(reason="preflight_unreadable") == 1
    assert w.metrics.ignored.get(reason="preflight_unbound") == 1
    listed = [r for r in cluster.api.requests if r.path == "/api/v1/pods" and "labelSelector" in r.query]
    assert listed
    assert listed[0].query == {"labelSelector": "meridian.dev/team", "limit": "500"}  # a page at a time


def test_preflight_retries_keep_the_latest_failure_and_old_ones_expire() -> None:
    old = {"exitCode": 1, "finishedAt": "2025-11-28T00:00:00Z", "message": MESSAGE}
    nccl = termination_message([Result("nccl", "fail", "no gIB")], NOW - 60)
    new = {"exitCode": 1, "finishedAt": "2025-11-29T07:59:00Z", "message": nccl}
    ray_pod = {  # a Ray worker restarts its init container: the failure sits in lastState
        "metadata": {"namespace": "research"},
        "spec": {"nodeName": "n-07"},
        "status": {
            "initContainerStatuses": [{"name": "preflight", "state": {"running": {}}, "lastState": {"terminated": new}}]
        },
    }
    stale = {
        "metadata": {"namespace": "research"},
        "spec": {"nodeName": "n-08"},
        "status": {"initContainerStatuses": [{"name": "preflight", "state": {"terminated": old}}]},
    }
    verdicts = Verdicts()
    preflight_failures([ray_pod, stale, {"status": "hostile"}, {}], NOW, 3600, verdicts)
    assert verdicts.preflight == {
        ("n-07", "research"): (health.Report(check="nccl", summary="no gIB", time=NOW - 60), NOW - 60)
    }
