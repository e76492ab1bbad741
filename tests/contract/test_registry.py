"""The registry's decoder refuses values that cannot be right (issue 27): one line per problem, with its path.

gkr uses what the registry says as is: a region's checkpoint bucket becomes a gcsfuse mount and the
other regions' resume URLs, its pod range the Lighthouse's allowed sources, the cluster name part of
a kubectl context and a gcloud command. Each hostile edit below is built from the shipped registry.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from contract import registry
from contract.problem import Invalid
from fleet.load import load
from fleet.registry import registry_of
from tests.conftest import SHIPPED

TEXT = registry.dumps(registry_of(load(SHIPPED)))
FIX = "regenerate it with `make generate`"

Edit = Callable[[dict[str, Any]], None]


def edited(*edits: Edit) -> str:
    data = json.loads(TEXT)
    for edit in edits:
        edit(data)
    return json.dumps(data)


def refused(text: str) -> list[str]:
    with pytest.raises(Invalid) as caught:
        registry.loads(text, "r.json")
    return list(caught.value.lines)


def region(i: int, key: str, value: Any) -> Edit:
    return lambda data: data["regions"][i].__setitem__(key, value)


# The issue's hostile registry, one edit each.
OUTSIDE_BUCKET = region(0, "checkpoint_bucket", "attacker-owned-bucket")
EVERY_ADDRESS = region(0, "pod_range", "0.0.0.0/0")
SHELL_CLUSTER = region(0, "cluster", "meridian-$(reboot)")


def test_the_shipped_registry_is_accepted_and_carries_the_fleet_plan() -> None:
    loaded = registry.loads(TEXT, "r.json")
    assert loaded.supernet == "10.0.0.0/8"
    assert loaded.checkpoint_prefix == "meridian-ckpt"
    assert {r.checkpoint_bucket for r in loaded.regions} == {f"meridian-ckpt-{r.name}" for r in loaded.regions}


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (OUTSIDE_BUCKET, "regions[0].checkpoint_bucket: 'attacker-owned-bucket' is not the fleet's bucket"),
        (EVERY_ADDRESS, "regions[0].pod_range: 0.0.0.0/0 is not inside the fleet's supernet 10.0.0.0/8"),
        (SHELL_CLUSTER, "regions[0].cluster: 'meridian-$(reboot)' is not a GKE cluster name"),
        (region(1, "pod_range", "10.0.0.0/14"), "regions[1].pod_range: 10.0.0.0/14 overlaps regions[0]'s"),
        (region(0, "pod_range", "10.0.0.1/13"), "regions[0].pod_range: '10.0.0.1/13' is not a CIDR range"),
        (region(0, "name", "us central1"), "regions[0].name: 'us central1' is not a GCP region name"),
        (
            lambda d: d["regions"][0]["pools"][0].__setitem__("zone", "europe-west4-a"),
            "regions[0].pools[0].zone: 'europe-west4-a' is not a zone of 'us-central1'",
        ),
        (lambda d: d.__setitem__("supernet", "0.0.0.0/0"), "supernet: 0.0.0.0/0 is not a private range (RFC 1918)"),
        (lambda d: d.__setitem__("supernet", "8.8.0.0/16"), "supernet: 8.8.0.0/16 is not a private range (RFC 1918)"),
        (lambda d: d.__setitem__("project", "x;id"), "project: 'x;id' is not a GCP project ID"),
        (lambda d: d["teams"][0].__setitem__("name", "../evals"), "teams[0].name: '../evals' is not a team name"),
        (
            lambda d: d["datasets"][0].__setitem__("name", "google-data"),
            "datasets[0].name: 'google-data' is not a Cloud Storage bucket name",
        ),
        (
            lambda d: d.__setitem__("checkpoint_prefix", "Goog"),
            "checkpoint_prefix: 'Goog' is not a Cloud Storage bucket name",
        ),
    ],
)
def test_a_value_that_cannot_be_right_is_one_line_with_its_path(edit: Edit, words: str) -> None:
    lines = refused(edited(edit))
    assert len([line for line in lines if words in line]) == 1, lines
    assert all(line.startswith("r.json: ") and line.endswith(FIX) and "\n" not in line for line in lines)


def test_the_issues_hostile_registry_is_refused_one_line_per_problem() -> None:
    lines = refused(edited(OUTSIDE_BUCKET, EVERY_ADDRESS, SHELL_CLUSTER))
    assert [line.split(": ")[1] for line in lines] == ["regions[0].cluster", "regions[0].checkpoint_bucket",
                                                       "regions[0].pod_range"]  # fmt: skip


def test_a_registry_without_the_fleet_plan_is_refused() -> None:
    (line,) = refused(edited(lambda d: d.pop("supernet")))
    assert line == f"r.json: supernet: missing; {FIX}"


@pytest.mark.parametrize(
    ("name", "ok"),
    [("meridian-us-central1", True), ("a", True), ("a" * 40, True), ("a" * 41, False), ("1abc", False),
     ("abc-", False), ("ab_c", False), ("$(reboot)", False)],
)  # fmt: skip
def test_cluster_names_follow_gkes_rules(name: str, ok: bool) -> None:
    assert registry.is_cluster_name(name) is ok
