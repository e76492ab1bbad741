"""Removing, shortening or narrowing a maintenance exclusion is flagged: node upgrades may reach training capacity."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from review.terraform import diff_plan, diff_stacks, exclusion_risks

HOLD = {
    "exclusion_name": "hold-node-upgrades",
    "start_time": "2026-12-01T00:00:00Z",
    "exclusion_options": {"scope": "NO_MINOR_OR_NODE_UPGRADES", "end_time_behavior": "UNTIL_END_OF_SUPPORT"},
}
CLUSTER: dict[str, Any] = {"name": "meridian-us-east4", "maintenance_policy": {"maintenance_exclusion": [HOLD]}}
RISK = (
    "maintenance exclusion hold-node-upgrades of cluster meridian-us-east4: "
    "node upgrades may then reach training capacity"
)


def _with(**exclusion: Any) -> dict[str, Any]:
    cluster = copy.deepcopy(CLUSTER)
    cluster["maintenance_policy"]["maintenance_exclusion"][0].update(exclusion)
    return cluster


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        ({**CLUSTER, "maintenance_policy": {}}, [f"removes {RISK}"]),
        (
            _with(end_time="2027-01-01T00:00:00Z", exclusion_options={"scope": "NO_MINOR_OR_NODE_UPGRADES"}),
            [f"shortens {RISK}"],
        ),
        (
            _with(exclusion_options={"scope": "NO_MINOR_UPGRADES", "end_time_behavior": "UNTIL_END_OF_SUPPORT"}),
            [f"narrows the scope of {RISK}"],
        ),
        (CLUSTER, []),
        (_with(start_time="2026-11-01T00:00:00Z"), []),
    ],
    ids=["removed", "shortened", "narrowed", "unchanged", "moved earlier"],
)
def test_exclusion_risks(after: dict[str, Any], expected: list[str]) -> None:
    assert exclusion_risks(CLUSTER, after) == expected


def test_a_later_end_is_not_a_risk_an_earlier_one_is() -> None:
    dated = _with(end_time="2027-01-01T00:00:00Z", exclusion_options={"scope": "NO_MINOR_OR_NODE_UPGRADES"})
    later = _with(end_time="2027-02-01T00:00:00Z", exclusion_options={"scope": "NO_MINOR_OR_NODE_UPGRADES"})
    assert exclusion_risks(dated, later) == []
    assert exclusion_risks(later, dated) == [f"shortens {RISK}"]


def test_the_estimate_flags_it_as_destructive() -> None:
    before = {"us-east4": {"resource": {"google_container_cluster": {"cluster": CLUSTER}}}}
    after = {"us-east4": {"resource": {"google_container_cluster": {"cluster": {**CLUSTER, "maintenance_policy": {}}}}}}
    ((diff,),) = [d.resources for d in diff_stacks(before, after, table={})]
    assert diff.action == "update"
    assert diff.destructive == f"removes {RISK}"


def test_a_real_plan_flags_it_as_destructive() -> None:
    plan_before = {
        "name": "meridian-us-east4",
        "maintenance_policy": [{"maintenance_exclusion": [{**HOLD, "exclusion_options": [HOLD["exclusion_options"]]}]}],
    }
    plan_after = {"name": "meridian-us-east4", "maintenance_policy": [{"maintenance_exclusion": []}]}
    change = {"actions": ["update"], "before": plan_before, "after": plan_after}
    plan = {
        "resource_changes": [
            {"address": "google_container_cluster.cluster", "type": "google_container_cluster", "change": change}
        ]
    }
    (resource,) = diff_plan("us-east4", plan).resources
    assert resource.destructive == f"removes {RISK}"
