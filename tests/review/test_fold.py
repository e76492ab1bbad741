"""review.fold: a destructive clause that repeats is said once (issue 31)."""

from __future__ import annotations

from review.fold import fold


def test_objects_of_one_kind_with_one_consequence_fold_into_one_line() -> None:
    tail = ", and with it the cluster in europe-west1: 454 nodes, 3,072 GPUs"
    lines = [f"europe-west1: replaces subnetwork rdma-{i}{tail}" for i in range(11)]
    lines.append("europe-west1: replaces cluster meridian-europe-west1: 454 nodes, 3,072 GPUs")
    assert fold(lines) == [
        "europe-west1: replaces 11 subnetworks (" + ", ".join(f"rdma-{i}" for i in range(11)) + ")"
        ", and with them the cluster in europe-west1: 454 nodes, 3,072 GPUs",
        "europe-west1: replaces cluster meridian-europe-west1: 454 nodes, 3,072 GPUs",
    ]


def test_the_same_fact_in_several_scopes_is_one_line() -> None:
    lines = [f"{c}: namespace team-evals is deleted, and everything in it" for c in ("c1", "c2", "c3")]
    lines += ["c3: namespace warden is deleted, and everything in it"]
    assert fold(lines) == [
        "c1, c2: namespace team-evals is deleted, and everything in it",
        "c3: 2 namespaces (team-evals, warden) are deleted, and everything in them",
    ]


def test_different_sizes_stay_apart_and_single_lines_are_kept() -> None:
    lines = [
        "us-east4: deletes node pool cpu in us-east4-a: 64 nodes",
        "us-east4: deletes node pool h200-a in us-east4-b: 384 nodes, 3,072 H200",
        "us-east4: node pool h200-a in us-east4-b: 384 nodes -> 1 node (-3,064 H200)",
    ]
    assert fold(lines) == lines
