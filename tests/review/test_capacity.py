"""Region capacity from what Terraform will do: any GPU decrease, and any move of a pool, is destructive."""

from __future__ import annotations

import copy
from typing import Any

from meridian_infra.report import Stacks, pool_capacity
from review.capacity import Delta, destructive_lines, plan_pools, stack_pools, terraform_capacity
from review.terraform import diff_stacks
from tests.conftest import SHIPPED_SPEC

H200 = {"type": "nvidia-h200-141gb", "count": 8}


def pool(name: str, zones: list[str], node_count: int | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name,
        "node_locations": zones,
        "node_config": {"machine_type": "a3-ultragpu-8g", "guest_accelerator": [H200]},
        **extra,
    }
    if node_count is not None:
        body["node_count"] = node_count
    return body


def stacks(**regions: dict[str, dict[str, Any]]) -> Stacks:
    return {r: {"resource": {"google_container_node_pool": pools}} for r, pools in regions.items()}


BASE = stacks(**{"us-east4": {"pool_h200-a": pool("h200-a", ["us-east4-b"], 384)}})


def test_pool_capacity_counts_per_zone_autoscaling_limits() -> None:
    total = pool("f", ["a", "b"], autoscaling={"total_max_node_count": 128})
    per_zone = pool("f", ["a", "b"], autoscaling={"max_node_count": 16})
    fixed = pool("f", ["a", "b"], 3)
    assert [pool_capacity(b)[:2] for b in (total, per_zone, fixed)] == [(128, 1024), (32, 256), (6, 48)]


def test_stack_pools_reads_size_machine_and_zones() -> None:
    (only,) = stack_pools(BASE).values()
    assert (only.stack, only.address, only.name) == ("us-east4", "google_container_node_pool.pool_h200-a", "h200-a")
    assert (only.nodes, only.gpus, only.gpu_type, only.machine_type) == (
        384,
        3072,
        "nvidia-h200-141gb",
        "a3-ultragpu-8g",
    )
    assert only.locations == ("us-east4-b",)


def test_shrinking_a_pool_is_destructive_though_terraform_updates_it() -> None:
    head = stacks(**{"us-east4": {"pool_h200-a": pool("h200-a", ["us-east4-b"], 1)}})
    (diff,) = diff_stacks(BASE, head)
    assert [(r.action, r.destructive) for r in diff.resources] == [("update", "")]
    capacity = terraform_capacity(BASE, head)
    assert capacity.regions == [Delta("us-east4", 3072, 8)]
    assert capacity.destructive == [
        "us-east4: node pool h200-a in us-east4-b: 384 nodes, 3,072 H200 -> 1 node, 8 H200 (-3,064 H200)"
    ]


def test_growing_a_pool_is_not() -> None:
    head = stacks(**{"us-east4": {"pool_h200-a": pool("h200-a", ["us-east4-b"], 448)}})
    capacity = terraform_capacity(BASE, head)
    assert capacity.regions == [Delta("us-east4", 3072, 3584)]
    assert [c.address for c in capacity.pools] == ["google_container_node_pool.pool_h200-a"]
    assert capacity.destructive == []


def test_moving_a_pool_is_destructive_once() -> None:
    head = stacks(**{"us-east4": {"pool_h200-a": pool("h200-a", ["us-east4-c"], 384)}})
    capacity = terraform_capacity(BASE, head)
    assert capacity.regions == [Delta("us-east4", 3072, 3072)]
    line = "us-east4: node pool h200-a moves from us-east4-b to us-east4-c: 384 nodes, 3,072 H200 -> 384 nodes, 3,072 H200 (3,072 H200 moved)"
    assert capacity.destructive == [line]
    diffs = diff_stacks(BASE, head)
    assert [r.action for d in diffs for r in d.resources] == ["replace"]  # node_locations recreates every node
    assert destructive_lines(diffs, capacity) == [line]  # the move line stands in for "replaces node pool ..."


def test_moving_and_shrinking_says_both() -> None:
    head = stacks(**{"us-east4": {"pool_h200-a": pool("h200-a", ["us-east4-c"], 256)}})
    assert terraform_capacity(BASE, head).destructive == [
        "us-east4: node pool h200-a moves from us-east4-b to us-east4-c: 384 nodes, 3,072 H200 -> 256 nodes, 2,048 H200 "
        "(-1,024 H200; 2,048 H200 moved)"
    ]


def test_a_removed_pool_is_reported_by_terraform_only() -> None:
    head = stacks(**{"us-east4": {}})
    capacity = terraform_capacity(BASE, head)
    assert capacity.regions == [Delta("us-east4", 3072, 0)]
    assert capacity.destructive == []
    assert destructive_lines(diff_stacks(BASE, head), capacity) == [
        "us-east4: deletes node pool h200-a in us-east4-b: 384 nodes, 3,072 H200"
    ]


def test_another_gpu_type_loses_the_old_one() -> None:
    h100 = pool("h200-a", ["us-east4-b"], 384)
    h100["node_config"] = {
        "machine_type": "a3-highgpu-8g",
        "guest_accelerator": [{"type": "nvidia-h100-80gb", "count": 8}],
    }
    capacity = terraform_capacity(BASE, stacks(**{"us-east4": {"pool_h200-a": h100}}))
    assert capacity.regions == [Delta("us-east4", 3072, 3072)]
    assert (
        capacity.destructive
        == [
            "us-east4: node pool h200-a in us-east4-b: 384 nodes, 3,072 H200 -> 384 nodes, 3,072 nvidia-h100-80gb (-3,072 H200)"  # not in the catalog: named as is
        ]
    )


def _plan(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any]:
    """A plan's view of a pool: nested blocks as one-item lists."""

    def listed(body: dict[str, Any] | None) -> dict[str, Any] | None:
        return body and {**body, "node_config": [body["node_config"]]}

    actions = ["update"] if before and after else ["delete"] if before else ["create"]
    return {
        "resource_changes": [
            {
                "address": "google_container_node_pool.pool_h200-a",
                "mode": "managed",
                "type": "google_container_node_pool",
                "change": {"actions": actions, "before": listed(before), "after": listed(after)},
            },
            {"address": "google_compute_network.n", "type": "google_compute_network", "change": {"before": {}}},
        ]
    }


def test_a_plan_file_decides_both_sides_of_its_stack() -> None:
    live = pool("h200-a", ["us-east4-b"], 200)  # the live pool differs from what BASE synthesizes
    plan = _plan(live, pool("h200-a", ["us-east4-b"], 100))
    before, after = plan_pools("us-east4", plan)
    assert [(p.nodes, p.gpus, p.machine_type) for p in before.values()] == [(200, 1600, "a3-ultragpu-8g")]
    assert [p.nodes for p in after.values()] == [100]
    capacity = terraform_capacity(BASE, BASE, {"us-east4": plan})
    assert capacity.regions == [Delta("us-east4", 1600, 800)]
    assert capacity.destructive == [
        "us-east4: node pool h200-a in us-east4-b: 200 nodes, 1,600 H200 -> 100 nodes, 800 H200 (-800 H200)"
    ]


def test_stacks_without_pools_have_no_row() -> None:
    head = {**BASE, "global": {"resource": {"google_storage_bucket": {"b": {"name": "b"}}}}}
    assert terraform_capacity(BASE, head).regions == [Delta("us-east4", 3072, 3072)]


# --- the shipped fleet, synthesized once per session (tests/conftest.py)

EDITS = {384: 1, 256: 0, 128: 0}  # Issue 26's edit of node_count in gpu_pools.py


def _expected_loss() -> int:
    """From fleet.yaml: the fixed-size pools (flex-start ones have no node_count) of those sizes, 8 GPUs a node."""
    pools = [p for r in SHIPPED_SPEC["regions"] for p in r["gpu_pools"] if p["capacity"]["mode"] != "flex_start"]
    return sum((p["nodes"] - EDITS[p["nodes"]]) * 8 for p in pools if p["nodes"] in EDITS)


def test_shipped_node_count_edits_take_9200_h200_down(stacks: Stacks) -> None:
    head = copy.deepcopy(stacks)
    edited = 0
    for config in head.values():
        for body in config.get("resource", {}).get("google_container_node_pool", {}).values():
            if body.get("node_count") in EDITS:
                body["node_count"] = EDITS[body["node_count"]]
                edited += 1
    assert edited == 4  # two pools of 384, one of 256, one of 128 (spot); the 128 flex pool autoscales
    diffs = diff_stacks(stacks, head)
    assert {r.action for d in diffs for r in d.resources} == {"update"}  # Terraform resizes in place
    capacity = terraform_capacity(stacks, head)
    lost = sum(c.lost for c in capacity.pools)
    assert lost == _expected_loss() == 9200
    assert sum(d.before - d.after for d in capacity.regions) == 9200
    assert len(capacity.destructive) == 4
    assert (
        "us-east4: node pool h200-a in us-east4-b: 384 nodes, 3,072 H200 -> 1 node, 8 H200 (-3,064 H200)"
        in destructive_lines(diffs, capacity)
    )


def test_shipped_pool_moved_to_another_zone_is_destructive(stacks: Stacks) -> None:
    head = copy.deepcopy(stacks)
    body = head["us-east4"]["resource"]["google_container_node_pool"]["pool_h200-a"]
    body["node_locations"] = ["us-east4-c"]
    capacity = terraform_capacity(stacks, head)
    assert capacity.destructive == [
        "us-east4: node pool h200-a moves from us-east4-b to us-east4-c: 384 nodes, 3,072 H200 -> 384 nodes, 3,072 H200 "
        "(3,072 H200 moved)"
    ]
    assert destructive_lines(diff_stacks(stacks, head), capacity) == capacity.destructive


def test_zones_a_plan_does_not_know_yet_are_no_move() -> None:
    after = pool("h200-a", [], 200)
    plan = _plan(pool("h200-a", ["us-east4-b"], 200), after)
    capacity = terraform_capacity(BASE, BASE, {"us-east4": plan})
    assert [c.moved for c in capacity.pools] == [False]
    assert capacity.destructive == []
