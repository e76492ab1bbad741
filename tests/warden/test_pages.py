"""Lists a tenant can grow are read a page at a time (issue 39), against the local API server.

The attack: teams may create Events without a count quota, and each full round read every NCCLFailure Event
in one unpaginated request: 200,000 Events took 1.1 GiB, over Warden's 512 MiB limit. Now every such list
(Events, team pods, live pods, Nodes) is asked for with `limit` and followed by `continue`; each page is
processed before the next is asked for; an expired continue token (410) reads the list again from the start.
What one round holds at its peak is measured by scripts/bench_warden_starvation.py, not here.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.warden.fakes import ApiState, ComputeState, FakeApiServer, FakeCompute, Request, node, pod, serving
from tests.warden.test_kube import POLICY, Cluster, nccl_event
from warden.kube import PAGE
from warden.metrics import WardenMetrics
from warden.nodecache import EventWatch, NodeCache
from warden.reports import TenantReports
from warden.sweeper import LIVE, Sweeper

NOW = 1_764_403_200.0  # 2025-11-29T08:00:00Z; nccl_event's Events are a minute older
PER_POD = 400  # Events each pod posts (a trainer retrying): with PAGE 500, the three pods' Events span three pages


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    api, gce = ApiState(), ComputeState()
    with serving(FakeApiServer, api) as url, serving(FakeCompute, gce) as gce_url:
        c = Cluster(api, gce, url, gce_url)
        c.clock.now = NOW
        yield c


def flooded(c: Cluster) -> None:
    """Three pods of a team on n-0, each having posted PER_POD NCCLFailure Events, in order."""
    c.api.nodes = {f"n-{i}": node(f"n-{i}") for i in range(3)}
    c.api.pods = [pod(f"w-{i}", "n-0") for i in range(3)]
    c.api.events = [nccl_event(f"w-{i}", "n-0") for i in range(3) for _ in range(PER_POD)]


def event_lists(c: Cluster) -> list[Request]:
    return [r for r in c.api.requests if r.path == "/api/v1/events" and r.query.get("watch") != "true"]


def test_a_round_reads_the_events_a_page_at_a_time(cluster: Cluster) -> None:
    flooded(cluster)
    warden = cluster.warden()
    verdicts = warden._tenant_reports(NOW)
    lists = event_lists(cluster)
    assert lists, "the round read no Events"
    assert all(r.query.get("limit") == str(PAGE) for r in lists), [r.query for r in lists]
    assert [r.query.get("continue") for r in lists] == [None, "500", "1000"]
    assert verdicts.nccl == {("n-0", "research"): 3}


def test_each_page_is_processed_before_the_next_is_asked_for(cluster: Cluster) -> None:
    """The pods named on a page are looked up before the next page: the round never holds the whole list."""
    flooded(cluster)
    cluster.warden()._tenant_reports(NOW)
    order = [
        "events" if r.path == "/api/v1/events" else r.path.rsplit("/", 1)[1]
        for r in cluster.api.requests
        if r.path == "/api/v1/events" or "/pods/" in r.path
    ]
    assert order == ["events", "w-0", "w-1", "events", "w-2", "events"]


def test_an_expired_continue_token_reads_the_events_again_from_the_start(cluster: Cluster) -> None:
    flooded(cluster)
    cluster.api.expire_continue = 1
    warden = cluster.warden()
    verdicts = warden._tenant_reports(NOW)
    assert [r.query.get("continue") for r in event_lists(cluster)] == [None, "500", None, "500", "1000"]
    assert verdicts.nccl == {("n-0", "research"): 3}  # counted once: the first read's counts were dropped
    assert warden.metrics.api_errors.get() == 0


def test_a_list_that_keeps_expiring_fails_like_any_call(cluster: Cluster) -> None:
    flooded(cluster)
    cluster.api.expire_continue = 100
    warden = cluster.warden()
    verdicts = warden._tenant_reports(NOW)
    assert verdicts.nccl == {}  # read again next round
    assert warden.metrics.api_errors.get() == 1
    assert [r.query.get("continue") for r in event_lists(cluster)] == [None, "500"] * 3


def test_nodes_are_listed_in_pages_and_an_expired_token_relists(cluster: Cluster) -> None:
    cluster.api.page_size = 2  # the server may give fewer than the limit
    cluster.api.nodes = {f"n-{i}": node(f"n-{i}") for i in range(5)}
    cluster.api.expire_continue = 1
    cache = NodeCache(cluster.kube(), clock=cluster.clock)
    cache.relist()
    lists = [r for r in cluster.api.requests if r.path == "/api/v1/nodes"]
    assert [r.query.get("continue") for r in lists] == [None, "2", None, "2", "4"]
    assert all(r.query["limit"] == str(PAGE) for r in lists)
    assert sorted(n["metadata"]["name"] for n in cache.snapshot()) == [f"n-{i}" for i in range(5)]


def test_the_event_watch_starts_from_a_one_item_list(cluster: Cluster) -> None:
    flooded(cluster)
    watch = EventWatch(cluster.kube(), "NCCLFailure", lambda name: True, lambda name: None, watch_timeout_s=1)
    watch.sync_once()
    assert [r.query.get("limit") for r in event_lists(cluster)] == ["1"]
    assert watch.resource_version == str(cluster.api.version)


def test_the_sweepers_live_pods_are_read_in_pages(cluster: Cluster) -> None:
    cluster.api.page_size = 2
    cluster.api.nodes = {f"n-{i}": node(f"n-{i}") for i in range(5)}
    cluster.api.pods = [pod(f"w-{i}", f"n-{i}") for i in range(3)]
    sweeper = Sweeper(cluster.kube(), POLICY, WardenMetrics())
    sweeper.observe(list(cluster.api.nodes), NOW)
    lists = [r for r in cluster.api.requests if r.path == "/api/v1/pods" and r.query.get("fieldSelector") == LIVE]
    assert [(r.query.get("limit"), r.query.get("continue")) for r in lists] == [("500", None), ("500", "2")]
    assert sorted(sweeper.idle_since) == ["n-3", "n-4"]


def test_with_a_reader_the_round_reads_no_events_and_takes_the_readers_verdicts(cluster: Cluster) -> None:
    """However long teams make the read, it runs apart from the rounds (warden.reports), on its own client."""
    flooded(cluster)
    warden = cluster.warden()
    warden.reports = TenantReports(cluster.kube(), warden.policy, warden.metrics, clock=cluster.clock)
    warden.reports.refresh()
    assert len(event_lists(cluster)) == 3
    before = len(cluster.api.requests)
    warden.round()
    during = cluster.api.requests[before:]
    assert not [r for r in during if r.path == "/api/v1/events" or "/pods/" in r.path]
    assert warden._tenant_reports(NOW).nccl == {("n-0", "research"): 3}
    assert warden.metrics.ignored.get(reason="no_verifier") == 1  # the reader's request reached the round


def test_the_reader_keeps_its_last_verdicts_when_a_read_fails(cluster: Cluster) -> None:
    flooded(cluster)
    metrics = WardenMetrics()
    reports = TenantReports(cluster.kube(), POLICY, metrics, clock=cluster.clock)
    reports.refresh()
    cluster.api.expire_continue = 100
    reports.refresh()
    assert reports.latest().nccl == {("n-0", "research"): 3}
    assert (reports.reads, metrics.api_errors.get()) == (1, 1)
