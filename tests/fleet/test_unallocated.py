"""Every GPU belongs to someone (issue 31): GPUs no team's nominal quota covers are the Kueue cohort's own
quota, lent to every team, and `meridian plan` warns about them in one line per region."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fleet.cli import main
from fleet.gitops.kueue import COHORT, kueue_objects
from fleet.load import load
from fleet.quotaplan import GPU
from tests.conftest import new_region

Spec = dict[str, Any]


def _grown(spec: Spec) -> Spec:
    """The issue's change: us-east4's h200-a from 384 to 448 nodes, every quota as it was."""
    (pool,) = [p for r in spec["regions"] if r["name"] == "us-east4" for p in r["gpu_pools"] if p["name"] == "h200-a"]
    assert pool["nodes"] == 384
    pool["nodes"] = 448
    return spec


def _no_quota_region(spec: Spec) -> Spec:
    """A new region no team has quota in."""
    spec["regions"].append(new_region("asia-south1", ["asia-south1-a", "asia-south1-b", "asia-south1-c"]))
    return spec


def _by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def _admissible_gpus(objects: list[dict[str, Any]], flavor: str) -> tuple[int, int]:
    """(nominal GPUs of every queue + the cohort's own, the most any one queue may borrow) in a flavor."""
    nominal, limits = 0, [0]
    for owner in [*_by_kind(objects, "ClusterQueue"), *_by_kind(objects, "Cohort")]:
        for group in owner["spec"].get("resourceGroups", []):
            for f in group["flavors"]:
                for r in f["resources"]:
                    if f["name"] == flavor and r["name"] == GPU:
                        nominal += r["nominalQuota"]
                        if owner["kind"] == "ClusterQueue" and owner["metadata"]["name"] != "warden-sweep":
                            limits.append(r["nominalQuota"] + r["borrowingLimit"])
    return nominal, max(limits)


def test_a_grown_pool_is_lent_through_the_cohort(
    spec: Spec, write_spec: Callable[[Spec], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    loaded = load(write_spec(_grown(spec)))
    region = next(r for r in loaded.fleet.regions if r.name == "us-east4")
    assert loaded.quotas.regions["us-east4"].unallocated == {"h200-a": 512}
    objects = kueue_objects(loaded.fleet, region, loaded.quotas)
    (cohort,) = _by_kind(objects, "Cohort")
    assert cohort["metadata"]["name"] == COHORT
    assert all(q["spec"]["cohortName"] == COHORT for q in _by_kind(objects, "ClusterQueue"))
    # Kueue can admit onto every GPU of the pool: nominal quotas plus the cohort's own cover its 3,584 GPUs,
    # and any team's queue may reach all of them by borrowing.
    assert _admissible_gpus(objects, "h200-a") == (3584, 3584)
    (group,) = cohort["spec"]["resourceGroups"]
    assert group["flavors"] == [
        {
            "name": "h200-a",
            "resources": [
                {"name": GPU, "nominalQuota": 512},
                {"name": "cpu", "nominalQuota": 512 * 224 // 8},
                {"name": "memory", "nominalQuota": f"{512 * 2952 // 8}Gi"},
            ],
        }
    ]
    assert main(["plan", "--fleet", str(loaded.path)]) == 0
    out, err = capsys.readouterr()
    (warning,) = err.splitlines()
    assert warning == (
        f"warning: {loaded.path}: regions[1] (us-east4): 512 of 3,584 GPUs are in no team's nominal quota "
        "(h200-a 512); Kueue lends them to every team through its cohort, guaranteed to none: "
        "give them to teams under teams[].quota.us-east4 to guarantee them"
    )
    assert "unallocated (lent through the cohort)" in out


def test_the_shipped_fleet_has_nothing_unallocated(spec: Spec, write_spec: Callable[[Spec], Path]) -> None:
    loaded = load(write_spec(spec))
    assert all(not q.cohort for q in loaded.quotas.regions.values())
    for region in loaded.fleet.regions:
        (cohort,) = _by_kind(kueue_objects(loaded.fleet, region, loaded.quotas), "Cohort")
        assert cohort["spec"] == {}


def test_a_region_without_quota_warns_and_is_lent(
    spec: Spec, write_spec: Callable[[Spec], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_spec(_no_quota_region(spec))
    assert main(["plan", "--fleet", str(path)]) == 0
    out, err = capsys.readouterr()
    (warning,) = err.splitlines()
    assert warning.startswith(f"warning: {path}: regions[3] (asia-south1): 512 of 512 GPUs are in no team's")
    row = next(line for line in out.splitlines() if line.startswith("unallocated"))
    assert row.split()[-2:] == ["512", "512"]  # asia-south1's column and the total: not an all-zero column
    loaded = load(path)
    region = loaded.fleet.regions[3]
    assert _admissible_gpus(kueue_objects(loaded.fleet, region, loaded.quotas), "h200-a") == (512, 512)
