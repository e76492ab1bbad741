"""Contract tests of Warden's Compute Engine calls against a local server that checks the exact requests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from contract.names import WARDEN_RECORD_ANNOTATION as RECORD
from contract.warden import HOST_REPORT_WAIT_S
from tests.warden.fakes import ComputeState, FakeCompute, merge_patch, node, serving
from tests.warden.test_kube import POLICY, Cluster, cluster, record_of, xid_condition
from warden import observe
from warden.errors import ApiError
from warden.gce import Compute, Instance, instance_of, operation_outcome
from warden.service import Warden
from warden.state import Budget, Facts, HostReport, Record, decide

__all__ = ["cluster"]  # the fixture, imported for its side effect on pytest


@pytest.fixture
def state() -> ComputeState:
    return ComputeState()


@pytest.fixture
def compute(state: ComputeState) -> Iterator[Compute]:
    with serving(FakeCompute, state) as url:
        yield Compute(token=lambda: "ya29.test", base=f"{url}/compute/v1")


NODE = Instance(
    "meridian-train-prod",
    "us-central1-b",
    "gke-meridian-us-central1-h200-a-1a2b3c4d-x7k9",
    group="gke-meridian-us-central1-h200-a-1a2b3c4d-grp",
)


def test_reset(compute: Compute, state: ComputeState) -> None:
    assert compute.reset(NODE)["name"] == "operation-1"
    (request,) = state.requests
    assert (
        request.path
        == "/compute/v1/projects/meridian-train-prod/zones/us-central1-b/instances/gke-meridian-us-central1-h200-a-1a2b3c4d-x7k9/reset"
    )
    assert (request.auth, request.content_type, request.body) == ("Bearer ya29.test", "application/json", {})


def test_report_host_as_faulty(compute: Compute, state: ComputeState) -> None:
    compute.report_host_as_faulty(NODE, "xid 79: GPU has fallen off the bus")
    (request,) = state.requests
    assert request.path.endswith("/instances/gke-meridian-us-central1-h200-a-1a2b3c4d-x7k9/reportHostAsFaulty")
    assert request.body == {
        "disruptionSchedule": "IMMEDIATE",
        "faultReasons": [{"behavior": "UNRECOVERABLE_GPU_ERROR", "description": "xid 79: GPU has fallen off the bus"}],
    }


def test_replace_recreates_the_instance_in_its_group_and_keeps_the_pool_size(
    compute: Compute, state: ComputeState
) -> None:
    # recreateInstances keeps the group's targetSize; deleteInstances would lower it by one per replacement.
    compute.recreate_in_group(NODE)
    (request,) = state.requests
    assert (request.method, request.auth, request.content_type) == ("POST", "Bearer ya29.test", "application/json")
    assert (
        request.path
        == "/compute/v1/projects/meridian-train-prod/zones/us-central1-b/instanceGroupManagers/gke-meridian-us-central1-h200-a-1a2b3c4d-grp/recreateInstances"
    )
    assert request.body == {
        "instances": ["zones/us-central1-b/instances/gke-meridian-us-central1-h200-a-1a2b3c4d-x7k9"]
    }
    assert not [r for r in state.requests if "deleteInstances" in r.path]
    with pytest.raises(ApiError, match="no managed instance group"):
        compute.recreate_in_group(Instance("p", "z", "n"))


def test_a_regional_group_is_recreated_through_its_region(compute: Compute, state: ComputeState) -> None:
    state.created_by[NODE.name] = "projects/123/regions/us-central1/instanceGroupManagers/regional-grp"
    compute.recreate_in_group(compute.group_of(Instance(NODE.project, NODE.zone, NODE.name)))
    assert state.requests[-1].path == (
        "/compute/v1/projects/meridian-train-prod/regions/us-central1/instanceGroupManagers/regional-grp/recreateInstances"
    )
    assert state.requests[-1].body == {"instances": [f"zones/us-central1-b/instances/{NODE.name}"]}


def test_instance_group_comes_from_created_by_metadata(compute: Compute, state: ComputeState) -> None:
    state.groups[NODE.name] = "gke-meridian-us-central1-h200-a-grp"
    found = compute.group_of(Instance(NODE.project, NODE.zone, NODE.name))
    assert found.group == "gke-meridian-us-central1-h200-a-grp"
    (request,) = state.requests
    assert (request.method, request.auth) == ("GET", "Bearer ya29.test")
    assert request.path.endswith(f"/zones/us-central1-b/instances/{NODE.name}")


def test_perform_maintenance(compute: Compute, state: ComputeState) -> None:
    compute.perform_maintenance(NODE)
    (request,) = state.requests
    assert request.path.endswith(f"/instances/{NODE.name}/performMaintenance")


def test_instance_from_provider_id() -> None:
    assert instance_of("gce://meridian-train-prod/us-central1-b/node-1") == Instance(
        "meridian-train-prod", "us-central1-b", "node-1"
    )
    assert instance_of("aws:///us-east-1a/i-0abc") is None
    assert instance_of("gce://only/two") is None


# --- Reporting the host, then recreating the VM (issue 38) ---------------------------------------------------
# Google: deleting or recreating the VM before the reportHostAsFaulty operation is DONE ends it in INTERNAL_ERROR,
# and reservation-less VMs (flex-start, spot) are refused with INSTANCES_WITHOUT_RESERVATION_NOT_SUPPORTED
# (https://cloud.google.com/ai-hypercomputer/docs/troubleshooting/troubleshoot-faulty-host-api).

BAD = "gke-meridian-us-central1-h200-a-0001"
OPERATIONS = "/compute/v1/projects/meridian-train-prod/zones/us-central1-b/operations"


def _xid79_cluster(cluster: Cluster, **extra: Any) -> Warden:
    """40 nodes of pool h200-a, BAD with Xid 79 (replace) and `extra` merged into its Node; a fresh Warden."""
    cluster.api.nodes = {
        f"gke-meridian-us-central1-h200-a-{i:04d}": node(f"gke-meridian-us-central1-h200-a-{i:04d}") for i in range(40)
    }
    cluster.api.nodes[BAD] = merge_patch(cluster.api.nodes[BAD], extra)
    cluster.api.nodes[BAD]["status"]["conditions"].append(xid_condition(79, cluster.clock.now - 5))
    cluster.gce.groups[BAD] = "gke-meridian-us-central1-h200-a-grp"
    return cluster.warden()


def _until_remediating(cluster: Cluster, warden: Warden) -> None:
    """Quarantine, drain (no pods: drained at once), then the round that starts the remediation."""
    for _ in range(3):
        warden.round()
        cluster.clock.now += 30
    assert record_of(cluster, BAD).phase == "remediating"


def _gce_calls(cluster: Cluster) -> list[tuple[str, str]]:
    return [(r.method, r.path.removeprefix("/compute/v1/projects/meridian-train-prod/")) for r in cluster.gce.requests]


def _action_events(cluster: Cluster) -> list[str]:
    return [e["message"] for e in cluster.api.events if e.get("reason") == "WardenAction"]


REPORT = ("POST", f"zones/us-central1-b/instances/{BAD}/reportHostAsFaulty")
POLL = ("GET", "zones/us-central1-b/operations/operation-1")
GROUP = ("GET", f"zones/us-central1-b/instances/{BAD}")
RECREATE = ("POST", "zones/us-central1-b/instanceGroupManagers/gke-meridian-us-central1-h200-a-grp/recreateInstances")


def test_the_vm_is_recreated_only_once_the_host_report_is_done(cluster: Cluster) -> None:
    warden = _xid79_cluster(cluster)
    _until_remediating(cluster, warden)
    assert _gce_calls(cluster) == [REPORT]  # the report alone: its operation runs while the VM is still there
    assert cluster.gce.requests[0].body["faultReasons"][0]["behavior"] == "UNRECOVERABLE_GPU_ERROR"

    # RUNNING: each round reads the operation (zoneOperations.get) and asks nothing else; a restarted Warden
    # reads its name from the Node's record and polls it, never reporting twice.
    for fresh in (False, True):
        (cluster.warden() if fresh else warden).round()
        cluster.clock.now += 30
    assert _gce_calls(cluster) == [REPORT, POLL, POLL]

    cluster.gce.operations["operation-1"]["status"] = "DONE"
    warden.round()
    assert _gce_calls(cluster) == [REPORT, POLL, POLL, POLL, GROUP, RECREATE]
    assert cluster.gce.requests[-1].body == {"instances": [f"zones/us-central1-b/instances/{BAD}"]}
    assert record_of(cluster, BAD).phase == "remediating"
    assert any("host report done" in m for m in _action_events(cluster))

    # Recreated: nothing more is asked of Compute Engine while the new VM boots.
    cluster.clock.now += 30
    warden.round()
    assert len(cluster.gce.requests) == 6


def test_a_host_report_that_ends_in_error_is_recorded_and_the_vm_recreated_anyway(cluster: Cluster) -> None:
    warden = _xid79_cluster(cluster)
    _until_remediating(cluster, warden)
    cluster.gce.operations["operation-1"].update(
        status="DONE",
        error={"errors": [{"code": "INTERNAL_ERROR", "message": "Internal error. Please try again."}]},
        httpErrorStatusCode=500,
    )
    warden.round()
    assert _gce_calls(cluster) == [REPORT, POLL, GROUP, RECREATE]
    assert any("INTERNAL_ERROR" in m for m in _action_events(cluster))


def test_a_refused_host_report_recreates_the_vm_next_round_not_after_the_remediation_timeout(
    cluster: Cluster,
) -> None:
    # An on-demand VM carries no spot or flex-start label: Compute Engine itself says no (HTTP 400).
    cluster.gce.refuse["/reportHostAsFaulty"] = (400, "INSTANCES_WITHOUT_RESERVATION_NOT_SUPPORTED")
    warden = _xid79_cluster(cluster)
    _until_remediating(cluster, warden)
    warden.round()
    assert _gce_calls(cluster) == [REPORT, GROUP, RECREATE]


SPOT = {"metadata": {"labels": {"cloud.google.com/gke-spot": "true", "cloud.google.com/gke-provisioning": "spot"}}}
# A flex-start node with queued provisioning (Meridian's flex pools): GKE's label and its queued taint.
FLEX = {
    "metadata": {"labels": {"cloud.google.com/gke-flex-start": "true"}},
    "spec": {"taints": [{"key": "cloud.google.com/gke-queued", "value": "true", "effect": "NoSchedule"}]},
}


@pytest.mark.parametrize("kind", [SPOT, FLEX], ids=["spot", "flex-start"])
def test_no_host_report_for_spot_or_flex_start_nodes(cluster: Cluster, kind: dict[str, Any]) -> None:
    warden = _xid79_cluster(cluster, **kind)
    _until_remediating(cluster, warden)
    assert _gce_calls(cluster) == [GROUP, RECREATE]  # straight to the recreate, in the same round


def test_an_unreadable_or_unanswered_report_holds_the_recreate_only_until_the_bound(cluster: Cluster) -> None:
    # The report's POST gets a 503 (it may have started an operation, with no name to poll), and on another
    # node the operation read fails: each round goes on, and HOST_REPORT_WAIT_S after the report the VM is
    # recreated anyway; no exception leaves the round.
    cluster.gce.refuse["/reportHostAsFaulty"] = (503, "backendError")
    warden = _xid79_cluster(cluster)
    _until_remediating(cluster, warden)
    assert record_of(cluster, BAD).report == "sent"
    assert warden.metrics.api_errors.get() == 1
    cluster.clock.now += HOST_REPORT_WAIT_S - 31
    warden.round()
    assert _gce_calls(cluster) == [REPORT]
    cluster.clock.now += 30
    warden.round()
    assert _gce_calls(cluster) == [REPORT, GROUP, RECREATE]
    assert any(m.startswith("host report not done after 1229s") for m in _action_events(cluster))


def test_an_operation_that_cannot_be_read_is_asked_again_then_bounded(cluster: Cluster) -> None:
    warden = _xid79_cluster(cluster)
    _until_remediating(cluster, warden)
    del cluster.gce.operations["operation-1"]  # zoneOperations.get answers 404
    warden.round()
    assert _gce_calls(cluster) == [REPORT, POLL]
    assert warden.metrics.api_errors.get() == 1
    cluster.clock.now += HOST_REPORT_WAIT_S
    warden.round()
    assert _gce_calls(cluster)[-2:] == [GROUP, RECREATE]


def test_the_operation_is_read_at_its_zonal_path(compute: Compute, state: ComputeState) -> None:
    state.operations["operation-17"] = {"name": "operation-17", "status": "DONE"}
    assert compute.operation(NODE, "operation-17")["status"] == "DONE"
    (request,) = state.requests
    assert (request.method, request.auth) == ("GET", "Bearer ya29.test")
    assert request.path == "/compute/v1/projects/meridian-train-prod/zones/us-central1-b/operations/operation-17"


@pytest.mark.parametrize(
    ("operation", "outcome"),
    [
        ({"status": "RUNNING"}, (False, "")),
        ({"status": "PENDING"}, (False, "")),
        ({"status": "DONE"}, (True, "")),
        (
            {"status": "DONE", "error": {"errors": [{"code": "INTERNAL_ERROR"}, {"code": "QUOTA"}]}},
            (True, "INTERNAL_ERROR, QUOTA"),
        ),
        ({"status": "DONE", "httpErrorStatusCode": 500}, (True, "HTTP 500")),
        ({"status": "DONE", "error": "garbage"}, (True, "UNKNOWN")),
        ({"status": "DONE", "error": {"errors": [{"code": "A\nB\x1b[31m" + "x" * 300}]}}, (True, "AB[31m" + "x" * 194)),
        ({"status": ["DONE"]}, (False, "")),
        ({}, (False, "")),
    ],
)
def test_an_operation_is_read_as_done_or_not_and_its_errors(
    operation: dict[str, Any], outcome: tuple[bool, str]
) -> None:
    assert operation_outcome(operation) == outcome


# The decision alone (pure): what a replacement waits for, and when it stops waiting.
REPORTING = Record(phase="remediating", since=0.0, action="replace", reason="xid 79", boot_id="1", report="operation-1")
BUDGET = Budget(True, True)


def _next(record: Record, facts: Facts, now: float) -> tuple[Record, list[str]]:
    decision = decide(record, [], facts, now, POLICY, BUDGET)
    return decision.record, [c.verb for c in decision.commands]


def test_a_reservation_bound_replacement_reports_first_and_a_reservation_less_one_does_not() -> None:
    draining = replace(REPORTING, phase="draining", report="")
    reported, verbs = _next(draining, Facts(pods=0, boot_id="1"), 1000.0)
    assert (reported.phase, reported.report, verbs) == ("remediating", "sent", ["report_faulty"])
    recreated, verbs = _next(draining, Facts(pods=0, boot_id="1", reportable=False), 1000.0)
    assert (recreated.phase, recreated.report, verbs) == ("remediating", "", ["replace"])
    rebooting = replace(draining, action="reboot")
    assert _next(rebooting, Facts(pods=0, boot_id="1"), 1000.0)[1] == ["reboot"]


def test_the_recreate_waits_for_the_operation_and_is_asked_once() -> None:
    running = Facts(boot_id="1", report=HostReport(done=False))
    assert _next(REPORTING, running, 600.0) == (REPORTING, [])
    assert _next(REPORTING, Facts(boot_id="1"), 600.0) == (REPORTING, [])  # not read this round: wait
    after, verbs = _next(REPORTING, Facts(boot_id="1", report=HostReport(done=True)), 720.0)
    assert (after.report, after.since, verbs) == ("", 720.0, ["replace", "event"])
    # Asked: now the replacement's own timeout, from the recreate, as before.
    assert _next(after, Facts(boot_id="1"), 720.0 + POLICY.remediate_timeout_s - 1)[1] == []
    assert _next(after, Facts(boot_id="1"), 720.0 + POLICY.remediate_timeout_s)[1] == ["replace"]


def test_an_error_a_refusal_or_the_bound_ends_the_wait_and_is_told() -> None:
    waits = Facts(boot_id="1")  # the old VM, still up
    failed = decide(REPORTING, [], replace(waits, report=HostReport(True, "INTERNAL_ERROR")), 700.0, POLICY, BUDGET)
    assert [c.verb for c in failed.commands] == ["replace", "event"]
    assert failed.commands[1].detail == "host report done with INTERNAL_ERROR: recreating the VM"
    refused = decide(replace(REPORTING, report="refused"), [], waits, 30.0, POLICY, BUDGET)
    assert refused.commands[1].detail == "host report refused by Compute Engine: recreating the VM"
    assert _next(replace(REPORTING, report="sent"), waits, HOST_REPORT_WAIT_S - 1)[1] == []
    stuck = decide(REPORTING, [], replace(waits, report=HostReport()), HOST_REPORT_WAIT_S, POLICY, BUDGET)
    assert stuck.commands[1].detail == f"host report not done after {HOST_REPORT_WAIT_S:.0f}s: recreating the VM"


def test_a_node_back_on_its_own_during_the_report_goes_to_probation() -> None:
    back, verbs = _next(REPORTING, Facts(ready=True, boot_id="2"), 900.0)
    assert (back.phase, back.report, verbs) == ("probation", "", ["preflight"])


@pytest.mark.parametrize("forged", ["../../instances/x/delete", "Operation-1", "", 7, "op\n1", "a" * 129])
def test_a_report_field_warden_did_not_write_holds_the_node(forged: object) -> None:
    _, annotations = REPORTING.to_annotations()
    assert Record.from_annotations(annotations) == REPORTING
    raw = json.loads(annotations[RECORD])
    raw["report"] = forged
    record = Record.from_annotations({RECORD: json.dumps(raw)})
    assert (record.phase == "held") is (forged != "")


@pytest.mark.parametrize(
    ("labels", "taints", "reportable"),
    [
        ({}, [], True),
        ({"cloud.google.com/gke-provisioning": "standard"}, [], True),
        ({"cloud.google.com/gke-spot": "true"}, [], False),
        ({"cloud.google.com/gke-provisioning": "spot"}, [], False),
        ({"cloud.google.com/gke-preemptible": "true"}, [], False),
        ({"cloud.google.com/gke-flex-start": "true"}, [], False),
        ({"cloud.google.com/gke-provisioning": "flex-start"}, [], False),
        ({}, [{"key": "cloud.google.com/gke-queued", "value": "true", "effect": "NoSchedule"}], False),
        ({"cloud.google.com/gke-spot": "false"}, [], True),
    ],
)
def test_which_nodes_compute_engine_takes_a_host_report_for(
    labels: dict[str, str], taints: list[dict[str, str]], reportable: bool
) -> None:
    found = node("n-1", metadata={"labels": labels}, spec={"taints": taints})
    assert observe.reportable(found) is reportable
