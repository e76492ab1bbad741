"""Real plans (terraform show -json) decide actions; the workflow calls the real entry point."""

from __future__ import annotations

import subprocess
from typing import Any

from review.snapshot import stale_generated
from review.terraform import Change, diff_plan, diff_stacks, forcing, replacement_attributes


def _rc(address: str, kind: str, actions: list[str], before: Any, after: Any) -> dict[str, Any]:
    name = address.split(".", 1)[1]
    return {
        "address": address,
        "mode": "managed",
        "type": kind,
        "name": name,
        "provider_name": "registry.terraform.io/hashicorp/google",
        "change": {
            "actions": actions,
            "before": before,
            "after": after,
            "after_unknown": {},
            "before_sensitive": False,
            "after_sensitive": False,
        },
    }


POOL = {
    "name": "h200-a",
    "node_count": 384,
    "node_locations": ["us-central1-b"],
    "node_config": [
        {"machine_type": "a3-ultragpu-8g", "guest_accelerator": [{"type": "nvidia-h200-141gb", "count": 8}]}
    ],
}

PLAN = {
    "format_version": "1.2",
    "terraform_version": "1.9.8",
    "resource_changes": [
        _rc(
            "google_container_node_pool.pool_h200-a",
            "google_container_node_pool",
            ["delete", "create"],
            POOL,
            {**POOL, "max_pods_per_node": 64},
        ),
        _rc(
            "google_container_cluster.cluster",
            "google_container_cluster",
            ["no-op"],
            {"name": "meridian-us-central1"},
            {"name": "meridian-us-central1"},
        ),
        _rc(
            "google_compute_firewall.fw_internal",
            "google_compute_firewall",
            ["update"],
            {"source_ranges": ["10.0.0.0/13"]},
            {"source_ranges": ["10.0.0.0/12"]},
        ),
        _rc("google_storage_bucket.extra", "google_storage_bucket", ["create"], None, {"name": "x"}),
        _rc("google_compute_subnetwork.old", "google_compute_subnetwork", ["delete"], {"name": "meridian-old"}, None),
        _rc("data.google_client_config.me", "google_client_config", ["read"], None, {}),
    ],
}


def test_plan_actions_decide() -> None:
    diff = diff_plan("us-central1", PLAN)
    assert diff.source == "plan"
    actions = {r.address: r.action for r in diff.resources}
    assert actions == {
        "google_container_node_pool.pool_h200-a": "replace",
        "google_compute_firewall.fw_internal": "update",
        "google_storage_bucket.extra": "create",
        "google_compute_subnetwork.old": "delete",
    }
    losses = [r.destructive for r in diff.resources if r.destructive]
    assert losses == [
        "replaces node pool h200-a in us-central1-b: 384 nodes, 3,072 H200",
        "deletes subnetwork meridian-old, and with it the cluster in us-central1: 384 nodes, 3,072 GPUs",
    ]
    firewall = next(r for r in diff.resources if r.action == "update")
    assert [(c.path, c.before, c.after) for c in firewall.changes] == [
        ("source_ranges.0", "10.0.0.0/13", "10.0.0.0/12")
    ]


def test_estimate_knows_in_place_growth_from_a_move() -> None:
    table = replacement_attributes()
    grow = Change("ip_cidr_range", "10.8.128.0/20", "10.8.128.0/19")
    move = Change("ip_cidr_range", "10.8.128.0/20", "10.9.0.0/20")
    assert forcing("google_compute_subnetwork", [grow], table) == []
    assert forcing("google_compute_subnetwork", [move], table) == [move]
    labels = Change("node_config.labels.team", "a", "b")
    accelerator = Change("node_config.guest_accelerator.0.count", 8, 4)
    assert forcing("google_container_node_pool", [labels, accelerator], table) == [accelerator]


def test_removed_pool_is_destructive_in_the_estimate() -> None:
    before = {
        "us-east4": {
            "resource": {
                "google_container_node_pool": {
                    "pool_h200-a": {
                        "name": "h200-a",
                        "node_count": 16,
                        "node_locations": ["us-east4-b"],
                        "node_config": {"guest_accelerator": [{"type": "nvidia-h200-141gb", "count": 8}]},
                    }
                }
            }
        }
    }
    after: dict[str, Any] = {"us-east4": {"resource": {}}}
    (diff,) = diff_stacks(before, after)
    assert [r.destructive for r in diff.resources] == ["deletes node pool h200-a in us-east4-b: 16 nodes, 128 H200"]


def test_replacement_table_covers_the_guarded_types() -> None:
    table = replacement_attributes()
    assert {
        "google_container_cluster",
        "google_container_node_pool",
        "google_compute_subnetwork",
        "google_compute_network",
    } <= set(table)
    assert "node_config.machine_type" in table["google_container_node_pool"]


def test_stale_generated_is_one_line() -> None:
    def check(rc: int, err: str) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess([], rc, "", err)

    assert stale_generated("HEAD", check(0, "")) is None
    stale = "".join(f"stale: outdated: kustomize/overlays/c/{n}.yaml\n" for n in range(5))
    assert stale_generated("HEAD", check(1, stale + "generated files are stale: run `make generate`\n")) == (
        "HEAD: the committed kustomize/ and argocd/ files are stale against its fleet.yaml "
        "(outdated: kustomize/overlays/c/0.yaml, outdated: kustomize/overlays/c/1.yaml, "
        "outdated: kustomize/overlays/c/2.yaml and 2 more): run `make generate` and commit the result"
    )
    assert stale_generated("BASE main", check(2, "usage: ...\nerror: unrecognized arguments: --check\n")) == (
        "BASE main: `meridian generate --check` failed: error: unrecognized arguments: --check"
    )
