"""Contract tests of Warden's Compute Engine calls against a local server that checks the exact requests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.warden.fakes import ComputeState, FakeCompute, serving
from warden.errors import ApiError
from warden.gce import Compute, Instance, instance_of


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
