"""The facts of the synthesized stacks a reviewer checks, read from their Terraform JSON.

Per stack: how many resources of each type; every node pool's machine, size, locations, capacity
(reservation, spot, flex-start), upgrade and repair settings; every firewall rule's ranges, ports and
targets; every subnet's ranges; every IAM grant, by role. tests/infra/test_inventory.py compares them with
the written-down copy in tests/infra/inventory/ (fleet.inventory has the format).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from meridian_infra.report import Stacks, resources

Facts = dict[str, Any]

# Node pool settings that decide what capacity the pool holds and how it changes, as written.
_POOL_SETTINGS = ("node_count", "initial_node_count", "autoscaling", "upgrade_settings", "management")
_POOL_CAPACITY = ("placement_policy", "queued_provisioning")
_NODE_CAPACITY = ("reservation_affinity", "spot", "flex_start")
_FIREWALL_FIELDS = ("direction", "network", "priority", "source_ranges", "destination_ranges")
_FIREWALL_TARGETS = ("target_service_accounts", "target_tags", "source_service_accounts", "source_tags")


# A Terraform expression that only names something: another stack's output, or a resource's attribute.
_OUTPUT = re.compile(r"\$\{data\.terraform_remote_state\.(\w+)_state\.outputs\.(\w+)\}")
_REFERENCE = re.compile(r"\$\{([\w.-]+)\}")


def readable(value: Any) -> Any:
    """References written shorter: `global.main_network` for the global stack's output, `<type>.<name>.<attr>`
    for a resource's attribute; everything else as it is."""
    if isinstance(value, str):
        return _REFERENCE.sub(r"\1", _OUTPUT.sub(r"\1.\2", value))
    if isinstance(value, list):
        return [readable(v) for v in value]
    if isinstance(value, dict):
        return {readable(k): readable(v) for k, v in value.items()}
    return value


def _present(body: dict[str, Any], keys: tuple[str, ...]) -> Facts:
    return {key: body[key] for key in keys if body.get(key) is not None}


def node_pool(body: dict[str, Any]) -> Facts:
    """What a node pool is made of and where, as synthesized."""
    node = body.get("node_config") or {}
    facts = {
        "machine_type": node.get("machine_type"),
        "locations": body.get("node_locations"),
        **_present(body, _POOL_SETTINGS),
        **_present(body, _POOL_CAPACITY),
        **_present(node, _NODE_CAPACITY),
    }
    accelerators = [f"{a['count']} x {a['type']}" for a in node.get("guest_accelerator") or []]
    if accelerators:
        facts["accelerators"] = accelerators
    taints = [f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in node.get("taint") or []]
    if taints:
        facts["taints"] = taints
    networks = (body.get("network_config") or {}).get("additional_node_network_configs") or []
    if networks:
        facts["additional_networks"] = len(networks)
    return facts


def _rules(rules: list[dict[str, Any]]) -> list[str]:
    """`tcp:443,8443`, or the protocol alone where every port is allowed."""
    return [f"{r['protocol']}:{','.join(r['ports'])}" if r.get("ports") else r["protocol"] for r in rules]


def firewall(body: dict[str, Any]) -> Facts:
    facts = {**_present(body, _FIREWALL_FIELDS), **_present(body, _FIREWALL_TARGETS)}
    for action in ("allow", "deny"):
        if body.get(action):
            facts[action] = _rules(body[action])
    return facts


def subnet(body: dict[str, Any]) -> Facts:
    facts: Facts = {"range": body["ip_cidr_range"], "network": body["network"]}
    secondary = {r["range_name"]: r["ip_cidr_range"] for r in body.get("secondary_ip_range") or []}
    if secondary:
        facts["secondary_ranges"] = secondary
    return facts


def grant(body: dict[str, Any]) -> str:
    """`member on what` of an IAM member resource (and its condition's title, if any)."""
    scope = next(
        (str(body[key]) for key in ("managed_folder", "bucket", "repository", "service_account_id") if key in body),
        "the project",
    )
    condition = body.get("condition", {}).get("title")
    return f"{body['member']} on {scope}" + (f" if {condition}" if condition else "")


def stack(body: dict[str, Any]) -> Facts:
    """One stack's inventory; resources keyed by their name in the cloud (the Terraform one if none)."""
    everything = resources(body)
    facts: Facts = {"resources": dict(Counter(kind for kind, _, _ in everything))}
    sections = {
        "google_container_node_pool": ("node_pools", node_pool),
        "google_compute_firewall": ("firewalls", firewall),
        "google_compute_subnetwork": ("subnets", subnet),
    }
    for kind, name, item in everything:
        if kind in sections:
            section, facts_of = sections[kind]
            facts.setdefault(section, {})[item.get("name", name)] = facts_of(item)
        elif kind.endswith("_iam_member"):  # by role: who holds it, where
            facts.setdefault("grants", {}).setdefault(item["role"], []).append(grant(item))
    for members in facts.get("grants", {}).values():
        members.sort()
    return facts


def inventory(stacks: Stacks) -> Facts:
    """Every stack's inventory, by stack name."""
    return {name: readable(stack(body)) for name, body in stacks.items()}
