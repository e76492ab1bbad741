"""The review's reading of firewall rules: who can reach what, ranges named by their subnet."""

from __future__ import annotations

import copy
from typing import Any

from review.access import access_changes

NODES = "${data.terraform_remote_state.global_state.outputs.nodes_service_account}"


def _region(pods: str, nodes: str, rules: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "resource": {
            "google_compute_subnetwork": {
                "subnet": {
                    "ip_cidr_range": nodes,
                    "secondary_ip_range": [{"range_name": "pods", "ip_cidr_range": pods}],
                }
            },
            "google_compute_firewall": rules,
        }
    }


def _rule(name: str, sources: list[str], destination: str, **allow: Any) -> dict[str, Any]:
    return {
        "name": name,
        "direction": "INGRESS",
        "allow": [{"protocol": "tcp", **allow}],
        "source_ranges": sources,
        "destination_ranges": [destination],
        "target_service_accounts": [NODES],
    }


BEFORE = {
    "a": _region("10.0.0.0/13", "10.8.0.0/20", {"fw": _rule("m-a-cross-region", ["10.16.0.0/13"], "10.0.0.0/13")}),
    "b": _region("10.16.0.0/13", "10.24.0.0/20", {"fw": _rule("m-b-cross-region", ["10.0.0.0/13"], "10.16.0.0/13")}),
}


def test_no_change_no_line() -> None:
    assert access_changes(BEFORE, copy.deepcopy(BEFORE)) == []


def test_a_new_region_is_named_in_every_rule_it_widens() -> None:
    after = copy.deepcopy(BEFORE)
    after["a"]["resource"]["google_compute_firewall"]["fw"]["source_ranges"].append("10.32.0.0/13")
    after["c"] = _region(
        "10.32.0.0/13",
        "10.40.0.0/20",
        {"fw": _rule("m-c-cross-region", ["10.0.0.0/13", "10.16.0.0/13"], "10.32.0.0/13")},
    )
    assert access_changes(BEFORE, after) == [
        "a: firewall rule m-a-cross-region now also admits 10.32.0.0/13 (c pods)",
        "c: new firewall rule m-c-cross-region allows tcp (any port) from 10.0.0.0/13 (a pods), "
        "10.16.0.0/13 (b pods) to 10.32.0.0/13 (c pods) on instances of nodes service account",
    ]


def test_removed_sources_ports_and_rules() -> None:
    after = copy.deepcopy(BEFORE)
    after["a"]["resource"]["google_compute_firewall"]["fw"]["source_ranges"] = ["0.0.0.0/0"]
    after["b"]["resource"]["google_compute_firewall"]["fw"]["allow"] = [{"protocol": "tcp", "ports": ["29510"]}]
    after["b"]["resource"]["google_compute_firewall"]["lh"] = _rule("m-b-lh", [], "10.24.0.0/20")
    del after["a"]["resource"]["google_compute_subnetwork"]  # ranges are named from either side
    lines = access_changes(BEFORE, after)
    assert lines[0] == (
        "a: firewall rule m-a-cross-region now also admits 0.0.0.0/0 (anywhere); no longer admits 10.16.0.0/13 (b pods)"
    )
    assert lines[1].startswith("b: firewall rule m-b-cross-region now allows tcp:29510 from 10.0.0.0/13 (a pods) ")
    assert lines[1].endswith(
        "(was: allows tcp (any port) from 10.0.0.0/13 (a pods) to 10.16.0.0/13 (b pods) on instances of nodes service account)"
    )
    assert lines[2].startswith(
        "b: new firewall rule m-b-lh allows tcp (any port) from (none) to 10.24.0.0/20 (b nodes)"
    )
    gone = copy.deepcopy(BEFORE)
    del gone["b"]
    assert access_changes(BEFORE, gone) == [
        "b: firewall rule m-b-cross-region removed; it allows tcp (any port) from 10.0.0.0/13 (a pods) "
        "to 10.16.0.0/13 (b pods) on instances of nodes service account"
    ]
