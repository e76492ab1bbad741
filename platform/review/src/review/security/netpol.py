"""NetworkPolicies: peers and ports admitted beyond the old side, and namespaces left without one."""

from __future__ import annotations

import json
from ipaddress import ip_network

from review.kubernetes import Obj, key
from review.security.common import dicts

# --- NetworkPolicy --------------------------------------------------------------------------------

_DIRECTIONS = {"Ingress": ("ingress", "from"), "Egress": ("egress", "to")}


def _restricts(policy: Obj) -> set[str]:
    spec = policy.get("spec") or {}
    return set(spec.get("policyTypes") or ["Ingress", *(["Egress"] if "egress" in spec else [])])


def _or_any(items: list[Obj]) -> list[Obj | None]:
    return [*items] or [None]  # a rule without peers or ports admits any


def _allowances(policy: Obj, direction: str) -> list[tuple[Obj | None, Obj | None]]:
    """(peer, port) pairs a policy admits in one direction; None: any peer, any port."""
    field, side = _DIRECTIONS[direction]
    return [
        (peer, port)
        for rule in dicts((policy.get("spec") or {}).get(field))
        for peer in _or_any(dicts(rule.get(side)))
        for port in _or_any(dicts(rule.get("ports")))
    ]


def _cidr_within(inner: Obj, outer: Obj) -> bool:
    """Whether every address `inner` admits, `outer` admits too (its exceptions apart from `inner` do not matter)."""
    kept = set(inner.get("except") or [])
    try:
        cidr = ip_network(str(inner.get("cidr")))
        return cidr.subnet_of(ip_network(str(outer.get("cidr")))) and all(  # type: ignore[arg-type]
            e in kept or not cidr.overlaps(ip_network(str(e))) for e in outer.get("except") or []
        )
    except (ValueError, TypeError):
        return inner.get("cidr") == outer.get("cidr") and set(outer.get("except") or []) <= kept


def _peer_covered(peer: Obj | None, old: Obj | None) -> bool:
    if old is None or peer == old:
        return True
    return peer is not None and "ipBlock" in peer and "ipBlock" in old and _cidr_within(peer["ipBlock"], old["ipBlock"])


def _selector(selector: Obj, every: str) -> str:
    if not selector:
        return f"{every} (empty selector)"
    labels = [f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items()]
    labels += [json.dumps(e, sort_keys=True) for e in dicts(selector.get("matchExpressions"))]
    return ", ".join(labels)


def _peer(peer: Obj | None, names: dict[str, str]) -> str:
    if peer is None:
        return "anywhere"
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        cidr = str(block.get("cidr"))
        except_ = f" except {', '.join(block['except'])}" if block.get("except") else ""
        return f"{cidr}{' (' + names[cidr] + ')' if cidr in names else ''}{except_}"
    parts = []
    if "podSelector" in peer:
        parts.append(f"pods {_selector(peer['podSelector'] or {}, 'every pod')}")
    if "namespaceSelector" in peer:
        parts.append(f"in namespaces {_selector(peer['namespaceSelector'] or {}, 'every namespace')}")
    return " ".join(parts) or "anywhere"


def _port(port: Obj | None) -> str:
    if port is None:
        return "any port"
    end = f"-{port['endPort']}" if port.get("endPort") else ""
    return f"{port.get('protocol', 'TCP')} {port.get('port', 'any port')}{end}"


def policy_widening(old: Obj | None, new: Obj, names: dict[str, str], policed: bool) -> list[str]:
    """`policed`: the namespace had policies before. Policies add up: a new one in a namespace
    without any only restricts, in one with some it may admit what they refused."""
    if old is None and not policed:
        return []
    out = []
    selector = (new.get("spec") or {}).get("podSelector") or {}
    if old is None:
        old = {"spec": {"policyTypes": sorted(_restricts(new))}}  # compared with admitting nothing
    elif selector and selector != ((old.get("spec") or {}).get("podSelector") or {}):
        out.append(f"selects other pods ({_selector(selector, '')}): those it no longer selects are unrestricted")
    for direction, (word, side) in _DIRECTIONS.items():
        if direction not in _restricts(old):
            continue  # everything was admitted
        if direction not in _restricts(new):
            out.append(f"no longer restricts {word}")
            continue
        was = _allowances(old, direction)
        for peer, port in _allowances(new, direction):
            if not any(_peer_covered(peer, p) and (q is None or q == port) for p, q in was):
                out.append(f"now admits {word} {side} {_peer(peer, names)} on {_port(port)}")
    return out


def unprotected_namespaces(old: list[Obj], new: list[Obj]) -> list[str]:
    """Namespaces that had NetworkPolicies and have none left, while still holding objects."""

    def with_policies(objects: list[Obj]) -> set[str]:
        return {key(o)[2] for o in objects if o.get("kind") == "NetworkPolicy"}

    used = {key(o)[2] for o in new} | {key(o)[3] for o in new if o.get("kind") == "Namespace"}
    return sorted((with_policies(old) - with_policies(new)) & used)
