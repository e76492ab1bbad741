"""The network path of a run across regions, on the session's synthesized stacks (issue 19).

Each region admits exactly the other regions' pod ranges: TCP to the ports a run serves between
regions on its own pod range, and the Lighthouse port to its node range; nothing else, from nowhere else.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import cdktn
import pytest

from contract.names import HEAL_TLS_PORTS, LIGHTHOUSE_PORT, MANAGER_PORTS, RING_TLS_PORTS
from fleet.load import load
from fleet.model import Fleet
from fleet.planner import peer_pod_ranges, plan_addresses
from meridian_infra.cross_region import cross_region_firewalls
from meridian_infra.report import Stacks
from tests.conftest import SHIPPED, SHIPPED_SPEC

FLEET = load(SHIPPED).fleet
REGIONS = [r.name for r in FLEET.regions]
# The Lighthouse, heal transfers, the torchft Managers and the ring between regions (contract.names): never a store,
# a metrics port, Ray's ports or a port chosen at run time.
RUN_PORTS = ["29510", "29520-29527", "29528-29535", "29600-29663"]
NODES_ACCOUNT = "${data.terraform_remote_state.global_state.outputs.nodes_service_account}"
MAIN_NETWORK = "${data.terraform_remote_state.global_state.outputs.main_network}"


def _subnet(stack: dict[str, Any]) -> dict[str, Any]:
    subnet: dict[str, Any] = stack["resource"]["google_compute_subnetwork"]["subnet"]
    return subnet


def _secondary(stack: dict[str, Any], name: str) -> str:
    (cidr,) = [r["ip_cidr_range"] for r in _subnet(stack)["secondary_ip_range"] if r["range_name"] == name]
    return str(cidr)


def _rules(stack: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return dict(stack["resource"]["google_compute_firewall"])


@pytest.mark.parametrize("region", REGIONS)
def test_each_region_admits_exactly_the_other_regions_pods(stacks: Stacks, region: str) -> None:
    # Read from the other stacks' own subnets, not from the planner the stacks were built with.
    others = [_secondary(stacks[r], "pods") for r in REGIONS if r != region]
    not_pods = {_subnet(stacks[r])["ip_cidr_range"] for r in REGIONS} | {
        _secondary(stacks[r], "services") for r in REGIONS
    }
    rules = _rules(stacks[region])
    for key, ports, destination in (
        ("fw_cross_region", RUN_PORTS, _secondary(stacks[region], "pods")),
        ("fw_lighthouse", [str(LIGHTHOUSE_PORT)], _subnet(stacks[region])["ip_cidr_range"]),
    ):
        rule = rules[key]
        assert rule["network"] == MAIN_NETWORK  # the pod network, never an RDMA VPC
        assert rule["direction"] == "INGRESS"
        assert rule["source_ranges"] == others
        assert not set(rule["source_ranges"]) & (not_pods | {"0.0.0.0/0"})
        assert rule["destination_ranges"] == [destination]
        assert rule["allow"] == [{"protocol": "tcp", "ports": ports}]
        assert "deny" not in rule
        assert rule["target_service_accounts"] == [NODES_ACCOUNT]  # GKE nodes only, every pool runs as it
        assert rule["log_config"] == {"metadata": "EXCLUDE_ALL_METADATA"}  # logged as the other rules are
    assert rules["fw_cross_region"]["name"] == f"meridian-{region}-cross-region"
    assert rules["fw_lighthouse"]["name"] == f"meridian-{region}-lighthouse"


def test_the_run_s_ports_are_the_named_ranges() -> None:
    named = [range(LIGHTHOUSE_PORT, LIGHTHOUSE_PORT + 1), HEAL_TLS_PORTS, MANAGER_PORTS, RING_TLS_PORTS]
    assert [f"{r.start}-{r.stop - 1}" if len(r) > 1 else str(r.start) for r in named] == RUN_PORTS


def test_nothing_else_admits_another_region(stacks: Stacks) -> None:
    pods = {r: _secondary(stacks[r], "pods") for r in REGIONS}
    for region in REGIONS:
        for key, rule in _rules(stacks[region]).items():
            foreign = set(rule["source_ranges"]) & {c for r, c in pods.items() if r != region}
            assert not foreign or key in {"fw_cross_region", "fw_lighthouse"}, key


def test_no_egress_rule_so_no_egress_allow_is_needed(stacks: Stacks) -> None:
    # VPC egress is allowed by the implied rule unless a deny says otherwise; the stacks write none.
    rules = [
        rule for stack in stacks.values() for rule in stack["resource"].get("google_compute_firewall", {}).values()
    ]
    assert {rule["direction"] for rule in rules} == {"INGRESS"}
    assert not [rule for rule in rules if "deny" in rule]


def test_one_region_has_no_cross_region_rule() -> None:
    spec = copy.deepcopy(SHIPPED_SPEC)
    spec["regions"] = spec["regions"][:1]
    fleet = Fleet.model_validate(spec)
    addresses, _ = plan_addresses(fleet)
    (ranges,) = addresses.regions
    stack = cdktn.TerraformStack(cdktn.Testing.app(), "one")
    cross_region_firewalls(stack, fleet, ranges, peer_pod_ranges(addresses, ranges.region), "net", "nodes@example")
    assert "google_compute_firewall" not in json.loads(cdktn.Testing.synth(stack)).get("resource", {})
