"""Terraform, per stack: firewall rules that let more through, IAM granted to new members."""

from __future__ import annotations

import json
import re
from ipaddress import ip_network
from typing import Any

from review.access import FIREWALL, Grant, describe, grant
from review.kubernetes import Obj
from review.security.common import dicts

# --- Terraform ------------------------------------------------------------------------------------


def _within(value: str, values: tuple[str, ...]) -> bool:
    for outer in values:
        try:
            if ip_network(value).subnet_of(ip_network(outer)):  # type: ignore[arg-type]
                return True
        except (ValueError, TypeError):
            if value == outer:
                return True
    return False


def _port_ranges(ports: str) -> list[tuple[int, int]]:
    out = []
    for part in ports.split(","):
        low, _, high = part.partition("-")
        out.append((int(low), int(high or low)))
    return out


def _protocol_within(protocol: str, protocols: tuple[str, ...]) -> bool:
    name, _, ports = protocol.partition(":")
    if "all" in protocols or protocol in protocols or name in protocols:
        return True
    try:
        wanted = _port_ranges(ports) if ports else [(0, 65535)]
        held = [r for p in protocols if p.startswith(name + ":") for r in _port_ranges(p.partition(":")[2])]
    except ValueError:
        return False
    return all(any(lo >= a and hi <= b for a, b in held) for lo, hi in wanted)


def _reaches_more(new: Grant, old: Grant) -> bool:
    """Whether `new` matches traffic that `old` does not (no ranges: anywhere; no targets: every instance)."""
    if new.direction != old.direction:
        return True
    anywhere = ("0.0.0.0/0",)
    return (
        any(not _within(c, old.sources or anywhere) for c in new.sources or anywhere)
        or any(not _within(c, old.destinations or anywhere) for c in new.destinations or anywhere)
        or any(not _protocol_within(p, old.protocols) for p in new.protocols)
        or (bool(old.targets) and (not new.targets or not set(new.targets) <= set(old.targets)))
    )


def _widened(old: Grant, new: Grant) -> bool:
    """An allow rule that matches more, or a deny rule that matches less."""
    if old.action != new.action:
        return new.action == "allow"
    return _reaches_more(new, old) if new.action == "allow" else _reaches_more(old, new)


def firewall_widening(
    old_stack: Obj, new_stack: Obj, names: dict[str, str], old_names: dict[str, str] | None = None
) -> list[str]:
    """`names` label HEAD's ranges, `old_names` BASE's (review.access.access_changes says why both)."""
    was = names if old_names is None else old_names

    def rules(stack: Obj) -> dict[str, Grant]:  # a disabled rule lets nothing through and refuses nothing
        items = (stack.get("resource") or {}).get(FIREWALL) or {}
        return {k: grant(b) for k, b in items.items() if not b.get("disabled")}

    old, new = rules(old_stack), rules(new_stack)
    out = []
    for k, g in new.items():
        if k not in old and g.action == "allow":
            out.append(f"new firewall rule {g.name} {describe(g, names)}")
        elif k in old and _widened(old[k], g):
            out.append(f"firewall rule {g.name} now {describe(g, names)} (was: {describe(old[k], was)})")
    out += [
        f"firewall rule {g.name} removed; it {describe(g, was)}"
        for k, g in old.items()
        if k not in new and g.action == "deny"
    ]
    return out


_IAM = re.compile(r"google_(\w+?)_iam_(member|binding|policy)")
_CUSTOM_ROLE = re.compile(r"google_\w+_iam_custom_role")
_POLICY_DATA = re.compile(r"\$\{data\.google_iam_policy\.([\w-]+)\.policy_data\}")
_NOT_TARGET = {
    "role",
    "member",
    "members",
    "condition",
    "policy_data",
    "//",
    "depends_on",
    "provider",
    "lifecycle",
    "count",
    "for_each",
}
IamGrant = tuple[str, str, str, str]  # on what, role, to whom, under which condition ("" none)


def _condition(value: Any) -> str:
    if isinstance(value, list):
        value = value[0] if value else None
    if not isinstance(value, dict):
        return ""
    title = value.get("title")
    return f"{title}: {value.get('expression')}" if title else str(value.get("expression"))


def _policy_bindings(policy_data: Any, stack: Obj) -> list[Obj]:
    """The bindings of an authoritative policy: from the data.google_iam_policy it names, or its JSON."""
    match = _POLICY_DATA.fullmatch(str(policy_data))
    if match:
        document = ((stack.get("data") or {}).get("google_iam_policy") or {}).get(match[1]) or {}
        return dicts(document.get("binding"))
    try:
        return dicts(json.loads(str(policy_data)).get("bindings"))
    except (ValueError, AttributeError):
        return [{"role": f"policy {policy_data}", "members": ["(unread)"]}]


def iam_grants(stack: Obj) -> set[IamGrant]:
    out = set()
    for kind, items in (stack.get("resource") or {}).items():
        match = _IAM.fullmatch(kind)
        if not match or not isinstance(items, dict):
            continue
        for body in items.values():
            target = f"{match[1].replace('_', ' ')} " + ", ".join(
                str(v) for k, v in sorted(body.items()) if k not in _NOT_TARGET
            )
            bindings = (
                _policy_bindings(body.get("policy_data"), stack)
                if match[2] == "policy"
                else [
                    {
                        "role": body.get("role"),
                        "members": [body["member"]] if "member" in body else body.get("members"),
                        "condition": body.get("condition"),
                    }
                ]
            )
            out |= {
                (target, str(b.get("role")), str(m), _condition(b.get("condition")))
                for b in bindings
                for m in b.get("members") or []
            }
    return out


def iam_widening(old_stack: Obj, new_stack: Obj) -> list[str]:
    old = iam_grants(old_stack)
    unconditional = {g[:3] for g in old if not g[3]}  # a condition only narrows these
    out = [
        f"grants {role} to {member} on {target}{' when ' + condition if condition else ''}"
        for target, role, member, condition in sorted(iam_grants(new_stack) - old)
        if (target, role, member) not in unconditional
    ]

    def roles(stack: Obj) -> dict[str, Obj]:
        return {
            f"{k}.{n}": b
            for k, items in (stack.get("resource") or {}).items()
            if _CUSTOM_ROLE.fullmatch(k)
            for n, b in items.items()
        }

    was = roles(old_stack)
    for address, body in roles(new_stack).items():
        if added := set(body.get("permissions") or []) - set((was.get(address) or {}).get("permissions") or []):
            prefix = "new " if address not in was else ""
            out.append(f"{prefix}custom role {body.get('role_id')} grants {', '.join(sorted(added))}")
    return out
