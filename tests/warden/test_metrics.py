"""Warden's metrics: the client library's exposition, exactly the catalog's families, over HTTP."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from contract import metrics
from contract.metrics import WARDEN
from telemetry.exposition import check, table
from tests.conftest import REPO
from tests.warden.fakes import ApiState, ComputeState, FakeApiServer, FakeCompute, node, serving
from tests.warden.test_kube import Cluster, xid_condition
from warden.httpserve import serve_http
from warden.metrics import WardenMetrics
from warden.state import PHASES


@pytest.fixture(name="cluster")
def _cluster() -> Iterator[Cluster]:
    api, gce = ApiState(), ComputeState()
    with serving(FakeApiServer, api) as url, serving(FakeCompute, gce) as gce_url:
        yield Cluster(api, gce, url, gce_url)


def test_every_family_is_the_catalogs_even_before_anything_happened() -> None:
    assert check(metrics.WARDEN, WardenMetrics().render()) == []


def test_a_round_counts_nodes_by_pool_and_phase_and_serves_them(cluster: Cluster) -> None:
    cluster.api.nodes = {f"a-{i}": node(f"a-{i}") for i in range(40)} | {"b-0": node("b-0", pool="h200-b")}
    cluster.api.nodes["a-1"]["status"]["conditions"].append(xid_condition(79, cluster.clock.now - 5))
    warden = cluster.warden()
    warden.round()
    server = serve_http(0, {"/metrics": lambda: (200, warden.metrics.render())})
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10) as response:
            content_type, text = response.headers["Content-Type"], response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert content_type.startswith("text/plain; version=")
    assert check(metrics.WARDEN, text) == []
    nodes = {
        (s.labels["pool"], s.labels["phase"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "warden_nodes"
    }
    assert nodes["h200-a", "quarantined"] == 1
    assert sum(v for (pool, _), v in nodes.items() if pool == "h200-a") == 40
    assert sum(v for (pool, _), v in nodes.items() if pool == "h200-b") == 1
    # Every phase of every pool seen, so a phase or pool that empties reads 0 rather than its last count.
    assert {phase for pool, phase in nodes if pool == "h200-b"} == set(PHASES)
    assert warden.metrics.transitions.get(from_phase="healthy", to_phase="quarantined") == 1
    assert warden.metrics.xids.get(pool="h200-a", xid="79") == 1
    warden.round()
    assert warden.metrics.xids.get(pool="h200-a", xid="79") == 1  # the same Xid, still listed: counted once


def test_each_catalog_attribute_is_the_same_wardenmetrics_attribute() -> None:
    live = WardenMetrics()
    assert set(WardenMetrics.__annotations__) == {attribute for attribute, _ in WARDEN.items()}
    assert all(getattr(live, attribute).metric == metric for attribute, metric in WARDEN.items())


def test_the_readme_lists_exactly_the_catalog() -> None:
    assert table(metrics.WARDEN) in (REPO / "platform/warden/README.md").read_text()
