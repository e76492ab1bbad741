"""Who can reach what: the firewall rules a change adds, removes or widens, stack by stack.

A firewall change is neither destructive nor visible in capacity, and its attribute
diff (`source_ranges.2: (none) -> 10.48.0.0/13`) does not say whose range that is.
So each rule is read as a grant (protocols and ports, from, to, on which instances)
and ranges are named by the subnet that holds them in either side's stacks
("10.48.0.0/13 (asia-south1 pods)"). Read from the synthesized stacks of both
sides, which the review always has, also when plan files decide the Terraform diff.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

Stacks = dict[str, dict[str, Any]]
FIREWALL = "google_compute_firewall"
# Subnetworks by their resource name in a region stack (meridian_infra.network).
_SUBNETS = {"subnet": "nodes", "gvnic_subnet": "gVNIC"}
_WELL_KNOWN = {"0.0.0.0/0": "anywhere"}
# A region stack names its targets by the global stack's outputs: say which output.
_REMOTE = re.compile(r"\$\{data\.terraform_remote_state\.\w+\.outputs\.(\w+)\}")


@dataclass(frozen=True)
class Grant:
    """What one rule lets through."""

    name: str
    direction: str
    action: str  # allow or deny
    protocols: tuple[str, ...]  # "tcp", "tcp:29510", "all"
    sources: tuple[str, ...]
    destinations: tuple[str, ...]
    targets: tuple[str, ...]


def grant(body: dict[str, Any]) -> Grant:
    action = "deny" if body.get("deny") else "allow"
    protocols = []
    for entry in body.get(action) or []:
        ports = entry.get("ports") or []
        protocols.append(
            f"{entry.get('protocol')}:{','.join(map(str, ports))}" if ports else str(entry.get("protocol"))
        )
    return Grant(
        str(body.get("name", "?")),
        str(body.get("direction", "INGRESS")),
        action,
        tuple(protocols),
        tuple(body.get("source_ranges") or ()),
        tuple(body.get("destination_ranges") or ()),
        tuple(body.get("target_service_accounts") or body.get("target_tags") or ()),
    )


def range_names(*sides: Stacks) -> dict[str, str]:
    """CIDR -> "<stack> <what>" for every subnet range and control-plane range in the stacks."""
    names = dict(_WELL_KNOWN)
    for stacks in sides:
        for stack, body in stacks.items():
            resources = body.get("resource", {})
            for key, subnet in resources.get("google_compute_subnetwork", {}).items():
                names.setdefault(str(subnet.get("ip_cidr_range")), f"{stack} {_SUBNETS.get(key, key)}")
                for secondary in subnet.get("secondary_ip_range") or []:
                    names.setdefault(str(secondary.get("ip_cidr_range")), f"{stack} {secondary.get('range_name')}")
            for cluster in resources.get("google_container_cluster", {}).values():
                block = (cluster.get("private_cluster_config") or {}).get("master_ipv4_cidr_block")
                if block:
                    names.setdefault(str(block), f"{stack} control plane")
    return names


def _ranges(cidrs: tuple[str, ...], names: dict[str, str]) -> str:
    return ", ".join(f"{c} ({names[c]})" if c in names else c for c in cidrs) or "(none)"


def describe(g: Grant, names: dict[str, str]) -> str:
    """ "allows tcp from 10.16.0.0/13 (us-east4 pods) to 10.0.0.0/13 (us-central1 pods) on <targets>"."""
    what = ", ".join(p if ":" in p or p == "all" else f"{p} (any port)" for p in g.protocols)
    where = f"from {_ranges(g.sources, names)}" if g.direction == "INGRESS" else "out"
    text = f"{g.action}s {what} {where}"
    if g.destinations:
        text += f" to {_ranges(g.destinations, names)}"
    if g.targets:
        targets = (_REMOTE.sub(lambda m: m[1].replace("_", " "), t) for t in g.targets)
        text += f" on instances of {', '.join(targets)}"
    return text


def _rules(stack: dict[str, Any]) -> dict[str, Grant]:
    return {key: grant(body) for key, body in stack.get("resource", {}).get(FIREWALL, {}).items()}


def _changed(old: Grant, new: Grant, names: dict[str, str], old_names: dict[str, str]) -> str:
    """`names` label HEAD's ranges, `old_names` BASE's: a range may belong to another region on each side."""
    if (old.direction, old.action, old.protocols, old.destinations, old.targets) != (
        new.direction,
        new.action,
        new.protocols,
        new.destinations,
        new.targets,
    ):
        return f"now {describe(new, names)} (was: {describe(old, old_names)})"
    added = tuple(c for c in new.sources if c not in old.sources)
    removed = tuple(c for c in old.sources if c not in new.sources)
    parts = [f"now also admits {_ranges(added, names)}"] if added else []
    parts += [f"no longer admits {_ranges(removed, old_names)}"] if removed else []
    return "; ".join(parts) or f"now {describe(new, names)}"  # reordered sources only


def access_changes(before: Stacks, after: Stacks) -> list[str]:
    """One line per firewall rule a change creates, deletes or alters, prefixed by its stack.

    Each side's ranges are named from that side's subnets first: when a middle region is removed, the next
    region's new ranges are the removed one's old ranges, and BASE's rule must still name them as BASE's.
    """
    names, old_names = range_names(after, before), range_names(before, after)
    lines = []
    for stack in [*after, *(s for s in before if s not in after)]:
        old, new = _rules(before.get(stack, {})), _rules(after.get(stack, {}))
        for key in [*new, *(k for k in old if k not in new)]:
            if key not in old:
                lines.append(f"{stack}: new firewall rule {new[key].name} {describe(new[key], names)}")
            elif key not in new:
                lines.append(f"{stack}: firewall rule {old[key].name} removed; it {describe(old[key], old_names)}")
            elif old[key] != new[key]:
                lines.append(f"{stack}: firewall rule {new[key].name} {_changed(old[key], new[key], names, old_names)}")
    return lines
