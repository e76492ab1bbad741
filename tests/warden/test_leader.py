"""Warden's Lease: whatever the record says, never two leaders and never none.

Two electors against the fake API server on one fake clock, stepping every retry period as their renewal threads
do; the Lease record is edited under them (anyone with write access to it, or a bug elsewhere, can). The API
server itself refuses a Lease with leaseDurationSeconds <= 0 or leaseTransitions < 0 (kubernetes
pkg/apis/coordination/validation ValidateLeaseSpec) and times that are not RFC 3339 micro-times: every body an
elector writes is checked against those rules here, since the fake accepts anything.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from contract.metrics import WARDEN
from tests.warden.fakes import ApiState, ComputeState, FakeApiServer, serving
from tests.warden.test_kube import Cluster
from warden.leader import Elector
from warden.metrics import WardenMetrics, track_leadership

LEASE = "/apis/coordination.k8s.io/v1/namespaces/warden/leases/warden"
RETRY = 2  # the electors' retry period (client-go's default)


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[ApiState, str]]:
    """One fake API server for the module (only the Lease is used): stopping one costs half a second."""
    api = ApiState()
    with serving(FakeApiServer, api) as url:
        yield api, url


@pytest.fixture
def cluster(served: tuple[ApiState, str]) -> Cluster:
    api, url = served
    api.leases.clear()
    api.requests.clear()
    return Cluster(api, ComputeState(), url, "http://127.0.0.1:9")  # Compute is never called


def electors(c: Cluster) -> tuple[Elector, Elector]:
    a = Elector(c.kube(), "warden", "warden-a", clock=c.clock)
    b = Elector(c.kube(), "warden", "warden-b", clock=c.clock)
    assert a.step()
    assert not b.step()
    return a, b


def edit(c: Cluster, **fields: Any) -> None:
    """Replace the stored Lease (a copy: the fake keeps the request body it was created from)."""
    lease = copy.deepcopy(c.api.leases["warden"])
    lease.update(fields)
    c.api.leases["warden"] = lease


def edit_spec(c: Cluster, **spec: Any) -> None:
    edit(c, spec=c.api.leases["warden"]["spec"] | spec)


def run(c: Cluster, a: Elector, b: Elector, seconds: int, a_alive: bool = True) -> list[tuple[float, str]]:
    """Both renewal loops for `seconds` (a stopped if not alive); who held the Lease at each second."""
    held: list[tuple[float, str]] = []
    for tick in range(1, seconds + 1):
        c.clock.now += 1
        if tick % RETRY == 0 and a_alive:
            a.step()
        if tick % RETRY == 1:
            b.step()
        leaders = "".join(e.identity[-1] for e in (a, b) if e.holds())
        assert len(leaders) <= 1, f"two leaders {tick} s after the edit"
        held.append((tick, leaders))
    return held


def valid_for_the_api_server(body: dict[str, Any]) -> bool:
    spec = body["spec"]

    def micro(value: object) -> bool:
        try:
            return isinstance(value, str) and bool(datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ"))
        except ValueError:
            return False

    duration, transitions = spec["leaseDurationSeconds"], spec["leaseTransitions"]
    return (
        isinstance(spec["holderIdentity"], str)
        and type(duration) is int
        and duration > 0
        and type(transitions) is int
        and transitions >= 0
        and micro(spec["renewTime"])
        and micro(spec["acquireTime"])
    )


def written(c: Cluster) -> list[dict[str, Any]]:
    return [r.body for r in c.api.requests if r.method in ("PUT", "POST") and "leases" in r.path]


def test_a_negative_duration_gives_no_second_leader(cluster: Cluster) -> None:
    """The record's duration is not the standby's to trust: it waits its own 15 s (older client-go did too)."""
    a, b = electors(cluster)
    edit_spec(cluster, leaseDurationSeconds=-5)
    assert not b.step()  # before: b took over at once while a still held for up to 10 s
    held = run(cluster, a, b, 30)
    assert {who for _, who in held} == {"a"}  # a renews and rewrites its own duration
    assert cluster.api.leases["warden"]["spec"]["leaseDurationSeconds"] == a.duration


def test_a_dead_holder_with_a_negative_duration_is_replaced_after_the_electors_duration(cluster: Cluster) -> None:
    a, b = electors(cluster)
    edit_spec(cluster, leaseDurationSeconds=-5, renewTime="2025-11-29T00:00:00.000000Z")
    held = run(cluster, a, b, 30, a_alive=False)
    took_over = min(t for t, who in held if who == "b")
    assert b.duration < took_over <= b.duration + RETRY + 1  # the elector's 15 s from when b saw the record


@pytest.mark.parametrize(
    "spec",
    [
        {"leaseDurationSeconds": "fifteen"},
        {"leaseDurationSeconds": None},
        {"leaseDurationSeconds": 1e308},
        {"leaseTransitions": "many"},
        {"leaseTransitions": -3},
        {"acquireTime": "yesterday"},
        {"acquireTime": {"seconds": 1}},
        {"renewTime": ["not", "a", "time"]},
    ],
    ids=repr,
)
def test_a_live_holder_keeps_leading_through_a_malformed_record(cluster: Cluster, spec: dict[str, Any]) -> None:
    """Before: int("fifteen") failed every try, the holder's too: its validity lapsed and nobody led again."""
    a, b = electors(cluster)
    edit_spec(cluster, **spec)
    held = run(cluster, a, b, 40)
    assert {who for _, who in held} == {"a"}
    assert all(valid_for_the_api_server(body) for body in written(cluster))


@pytest.mark.parametrize(
    "edits",
    [
        {"spec": "garbage"},
        {"spec": {"holderIdentity": 42, "leaseDurationSeconds": 15}},
        {"spec": {"holderIdentity": ["warden-a"], "renewTime": 7}},
        {"spec": {"holderIdentity": "warden-a", "leaseDurationSeconds": "x", "leaseTransitions": "y"}},
    ],
    ids=repr,
)
def test_an_unreadable_record_elects_a_leader_after_the_electors_duration(
    cluster: Cluster,
    edits: dict[str, Any],
) -> None:
    """Unreadable is held by nobody we know, until 15 s after we first saw it: never at once, never never."""
    a, b = electors(cluster)
    edit(cluster, **edits)
    held = run(cluster, a, b, 40)
    first = min(t for t, who in held if who)  # a's own validity from its last renewal, then a gap, then a leader
    assert first == 1
    gap_ends = [t for t, who in held if who and t > a.renew_deadline]
    assert gap_ends, "nobody ever led again"
    assert min(gap_ends) <= a.duration + RETRY + 1
    assert held[-1][1] != ""  # and someone leads at the end
    assert all(valid_for_the_api_server(body) for body in written(cluster))


def test_the_leader_gauge_is_the_fenced_truth_when_scraped(cluster: Cluster) -> None:
    """Read at scrape time, not set by the round loop: a replica stuck in a long round stops reading 1 in time."""
    a, b = electors(cluster)
    ma, mb = WardenMetrics(), WardenMetrics()
    track_leadership(ma, a)
    track_leadership(mb, b)

    def leader(m: WardenMetrics) -> float:
        families = {f.name: f for f in text_string_to_metric_families(m.render())}
        return families[WARDEN.leader.name].samples[0].value

    assert (leader(ma), leader(mb)) == (1, 0)
    cluster.clock.now += a.renew_deadline + 1  # a's renewals stopped (its thread is stuck): it stops claiming
    assert (leader(ma), leader(mb)) == (0, 0)
    cluster.clock.now += a.duration
    assert b.step()
    assert (leader(ma), leader(mb)) == (0, 1)
