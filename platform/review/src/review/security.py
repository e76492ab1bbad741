"""What a change does to who may do what: every change that widens access, one line each.

A pod that turns privileged with the host's root filesystem mounted is, in the object
diff, "changed" like any other; here it is a finding. Both sides' objects are read as
grants (what a pod may touch on its node, what a role allows, what admission checks,
what traffic a NetworkPolicy admits, what a firewall rule or an IAM binding lets
through) and only what the new side grants beyond the old one is reported: narrowing
and unchanged objects say nothing, added objects count in full, and removing a
protection (a deny rule, a NetworkPolicy, `allowPrivilegeEscalation: false`) counts
as widening. Admission configuration is reported on any change, since which way a
changed selector or CEL expression cuts cannot be read off the objects.
Pure: objects and stacks in, findings out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from ipaddress import ip_network
from typing import Any

from review.access import FIREWALL, Grant, Stacks, describe, grant, range_names
from review.kubernetes import Clusters, Obj, key, label


@dataclass(frozen=True)
class Finding:
    scope: str  # the cluster or the stack
    what: str  # the object and exactly what widened
    new_in: str = ""  # the namespace, when the object is new and so is its namespace (a new team, say)


def _dicts(value: Any) -> list[Obj]:
    """The dict items of a list field; anything else is nothing (the input is hostile until validated)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b  # 0 is not False, 1 is not True


def _words(values: Iterable[Any], every: str) -> str:
    return ", ".join(f"* ({every})" if v == "*" else str(v) for v in sorted(set(map(str, values))))


# --- Pods -----------------------------------------------------------------------------------------


def pod_specs(value: Any, path: str = "", field: str = "") -> Iterator[tuple[str, Obj]]:
    """Every pod spec in an object, wherever a workload kind or a CRD embeds it (a `spec` with a
    `containers` list), with a short path: the fields on the way, list items by name, without
    `spec` and `template` ("" for a Deployment, "workerGroupSpecs[gpu]" for a RayCluster)."""
    if isinstance(value, dict):
        if field == "spec" and isinstance(value.get("containers"), list):
            yield path, value
            return
        for k, v in value.items():
            yield from pod_specs(v, path if k in ("spec", "template") else f"{path}.{k}".lstrip("."), str(k))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            name = (item.get("name") or item.get("groupName")) if isinstance(item, dict) else None
            yield from pod_specs(item, f"{path}[{name or i}]", field)


_CONTAINERS = {
    "initContainers": "init container",
    "containers": "container",
    "ephemeralContainers": "ephemeral container",
}
_NEVER = object()  # a switch without a risky value, or without a guard
# (field, the value that widens, the guard whose removal widens, said when it widens, said when the guard goes)
_POD_SWITCHES = (
    ("hostNetwork", True, _NEVER, "uses the host's network (hostNetwork)", ""),
    ("hostPID", True, _NEVER, "sees the host's processes (hostPID)", ""),
    ("hostIPC", True, _NEVER, "shares the host's IPC (hostIPC)", ""),
    ("automountServiceAccountToken", _NEVER, False, "", "mounts its service account token again"),
)
# Read from the container's securityContext over the pod's (runAsUser and runAsNonRoot may sit in either).
_CONTAINER_SWITCHES = (
    ("privileged", True, _NEVER, "becomes privileged", ""),
    ("allowPrivilegeEscalation", True, False, "allows privilege escalation", "no longer forbids privilege escalation"),
    ("runAsUser", 0, _NEVER, "runs as root (runAsUser 0)", ""),
    ("runAsNonRoot", False, True, "may run as root (runAsNonRoot false)", "no longer requires a non-root user"),
    ("readOnlyRootFilesystem", _NEVER, True, "", "gets a writable root filesystem"),
)


def _switches(table: tuple[tuple[str, Any, Any, str, str], ...], old: Obj, new: Obj) -> list[str]:
    out = []
    for field, risky, guard, widens, unguarded in table:
        was, now = old.get(field), new.get(field)
        if _same(now, risky) and not _same(was, risky):
            out.append(widens)
        elif _same(was, guard) and not _same(now, guard):
            out.append(unguarded)
    return out


def _containers(pod: Obj) -> dict[str, Obj]:
    """ "init container setup" -> the container, for every kind of container."""
    return {f"{what} {c.get('name')}": c for field, what in _CONTAINERS.items() for c in _dicts(pod.get(field))}


def _context(pod: Obj, container: Obj) -> Obj:
    return {**(pod.get("securityContext") or {}), **(container.get("securityContext") or {})}


def _caps(context: Obj, which: str) -> set[str]:
    return set(map(str, (context.get("capabilities") or {}).get(which) or []))


def _host_ports(container: Obj) -> set[str]:
    return {str(p["hostPort"]) for p in _dicts(container.get("ports")) if p.get("hostPort")}


def _host_paths(pod: Obj) -> dict[str, bool]:
    """Host path -> whether some container mounts it writable."""
    volumes = {
        v.get("name"): str(v["hostPath"].get("path"))
        for v in _dicts(pod.get("volumes"))
        if isinstance(v.get("hostPath"), dict)
    }
    out = dict.fromkeys(volumes.values(), False)
    for container in _containers(pod).values():
        for mount in _dicts(container.get("volumeMounts")):
            if mount.get("name") in volumes and mount.get("readOnly") is not True:
                out[volumes[mount["name"]]] = True
    return out


def pod_widening(old: Obj | None, new: Obj) -> list[str]:
    """What a pod spec may do on its node that it could not before (`old` None: a new pod spec)."""
    before = old or {}
    out = _switches(_POD_SWITCHES, before, new)
    account = new.get("serviceAccountName") or new.get("serviceAccount") or "default"
    was = before.get("serviceAccountName") or before.get("serviceAccount") or "default"
    if old is not None and account != was:
        out.append(f"runs as service account {account} (was {was}), with its rights")
    old_containers = _containers(before)
    for name, container in _containers(new).items():
        old_container = old_containers.get(name, {})
        was_ctx, now_ctx = _context(before, old_container), _context(new, container)
        said = _switches(_CONTAINER_SWITCHES, was_ctx, now_ctx)
        if added := _caps(now_ctx, "add") - _caps(was_ctx, "add"):
            said.append(f"adds capabilities {', '.join(sorted(added))}")
        if undropped := _caps(was_ctx, "drop") - _caps(now_ctx, "drop"):
            said.append(f"no longer drops capabilities {', '.join(sorted(undropped))}")
        if ports := _host_ports(container) - _host_ports(old_container):
            said.append(f"opens host ports {', '.join(sorted(ports))}")
        out += [f"{name} {s}" for s in said]
    old_paths = _host_paths(before)
    for path, writable in _host_paths(new).items():
        if path not in old_paths:
            out.append(f"mounts host path {path} {'read-write' if writable else 'read-only'}")
        elif writable and not old_paths[path]:
            out.append(f"mounts host path {path} read-write (was read-only)")
    return out


def _pods(old: Obj | None, new: Obj) -> list[str]:
    old_specs = dict(pod_specs(old or {}))
    lines = []
    for path, spec in pod_specs(new):
        if said := pod_widening(old_specs.get(path), spec):
            lines.append(f"{path + ' ' if path else ''}{'; '.join(said)}")
    return lines


# --- RBAC -----------------------------------------------------------------------------------------


def _allows(rule: Obj, field: str, value: str) -> bool:
    values = rule.get(field) or []
    return "*" in values or value in values


def _covered(old_rules: list[Obj], rule: Obj, target: tuple[str, str, str]) -> bool:
    """Whether an old rule already allows one (API group or URL, resource, verb) of a new rule."""
    group, resource, verb = target
    names = set(rule.get("resourceNames") or [])
    for o in old_rules:
        if not _allows(o, "verbs", verb):
            continue
        if resource == "" and _allows(o, "nonResourceURLs", group):
            return True
        own = set(o.get("resourceNames") or [])
        if (
            resource
            and _allows(o, "apiGroups", group)
            and _allows(o, "resources", resource)
            and (not own or (names and names <= own))
        ):
            return True
    return False


def _rule_widening(old: Obj | None, new: Obj, kind: str) -> list[str]:
    old_rules = _dicts((old or {}).get("rules"))
    out = []
    for rule in _dicts(new.get("rules")):
        targets = [
            (g, r, v)
            for g in rule.get("apiGroups") or []
            for r in rule.get("resources") or []
            for v in rule.get("verbs") or []
        ]
        targets += [(u, "", v) for u in rule.get("nonResourceURLs") or [] for v in rule.get("verbs") or []]
        fresh = [t for t in targets if not _covered(old_rules, rule, t)]
        verbs: dict[tuple[str, str], set[str]] = {}  # (API group, resource) or (URL, "") -> verbs newly granted
        for group, resource, verb in fresh:
            verbs.setdefault((group, resource), set()).add(verb)
        said: dict[tuple[str, str, bool], list[str]] = {}  # (verbs, API group, URL) -> resources or URLs
        for (group, resource), newly in verbs.items():
            url = not resource
            said.setdefault((_words(newly, "every verb"), "" if url else group or "core", url), []).append(
                group if url else resource
            )
        named = f" named {', '.join(map(str, rule['resourceNames']))}" if rule.get("resourceNames") else ""
        for (words, group, url), what in said.items():
            where = (
                f"URLs {_words(what, 'every URL')}"
                if url
                else f"{_words(what, 'every resource')}{named} in {_words([group], 'every API group')}"
            )
            out.append(f"grants {words} on {where}")
    if kind == "ClusterRole":
        selectors = (new.get("aggregationRule") or {}).get("clusterRoleSelectors")
        if selectors and selectors != ((old or {}).get("aggregationRule") or {}).get("clusterRoleSelectors"):
            out.append(f"aggregates the rules of every ClusterRole matching {json.dumps(selectors, sort_keys=True)}")
    return out


_AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"  # Kubernetes' built-in admin, edit and view roles collect these
_BROAD = {
    "system:authenticated": "every authenticated user",
    "system:unauthenticated": "anyone, unauthenticated",
    "system:serviceaccounts": "every service account",
}


def _aggregation(old: Obj | None, new: Obj, selectors: dict[str, list[Obj]]) -> list[str]:
    """A ClusterRole whose labels now put its rules into another, aggregating, ClusterRole."""
    was = ((old or {}).get("metadata") or {}).get("labels") or {}
    now = (new.get("metadata") or {}).get("labels") or {}
    out = [
        f"its rules join the built-in {k.removeprefix(_AGGREGATE)} role (label {k})"
        for k, v in now.items()
        if k.startswith(_AGGREGATE) and v == "true" and was.get(k) != "true"
    ]
    for role, terms in selectors.items():
        for term in terms:
            wanted = term.get("matchLabels") or {}
            if (
                wanted
                and all(now.get(k) == v for k, v in wanted.items())
                and not all(was.get(k) == v for k, v in wanted.items())
            ):
                out.append(
                    f"its rules join ClusterRole {role} (aggregation labels {', '.join(f'{k}={v}' for k, v in wanted.items())})"
                )
    return out


def _subject(s: Obj) -> str:
    name = str(s.get("name"))
    if s.get("kind") == "Group" and (name in _BROAD or name.startswith("system:serviceaccounts:")):
        broad = _BROAD.get(name) or f"every service account in namespace {name.rpartition(':')[2]}"
        return f"Group {name} ({broad})"
    return f"{s.get('kind')} {s['namespace'] + '/' if s.get('namespace') else ''}{name}"


def _binding_widening(old: Obj | None, new: Obj) -> list[str]:
    ref = new.get("roleRef") or {}
    role = f"{ref.get('kind')} {ref.get('name')}"
    out = []
    if old is not None and (old.get("roleRef") or {}) != ref:
        was = old.get("roleRef") or {}
        out.append(f"now refers to {role} (was {was.get('kind')} {was.get('name')})")
    before = [] if old is None or (old.get("roleRef") or {}) != ref else _dicts(old.get("subjects"))
    if added := [_subject(s) for s in _dicts(new.get("subjects")) if s not in before]:
        out.append(f"grants {role} to {', '.join(added)}")
    return out


# --- Admission ------------------------------------------------------------------------------------

ADMISSION = (
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
)


def _scalar(value: Any) -> bool:
    return not isinstance(value, dict | list) or (
        isinstance(value, list) and all(not isinstance(v, dict | list) for v in value)
    )


def _show(value: Any) -> str:
    return "(none)" if value is None else ",".join(map(str, value)) if isinstance(value, list) else str(value)


def _brief(item: Any) -> str:
    if isinstance(item, dict):
        text = str(
            item.get("message") or item.get("expression") or item.get("name") or json.dumps(item, sort_keys=True)
        )
    else:
        text = str(item)
    return text if len(text) <= 80 else text[:77] + "..."


def _by_name(items: list[Obj]) -> dict[str, Obj] | None:
    names = [i.get("name") for i in items]
    return (
        {str(n): i for n, i in zip(names, items, strict=True)} if all(names) and len(set(names)) == len(names) else None
    )


def config_changes(old: Any, new: Any, path: str = "") -> list[str]:
    """Each changed setting named by its path: scalars as old -> new, named list items one by one,
    other lists by the items removed and added (validations, rules)."""
    if old == new:
        return []
    if isinstance(old, dict | None) and isinstance(new, dict | None):
        old, new = old or {}, new or {}
        return [
            c
            for k in sorted(set(old) | set(new), key=str)
            for c in config_changes(old.get(k), new.get(k), f"{path}.{k}".lstrip("."))
        ]
    if _scalar(old) and _scalar(new):
        return [f"{path} {_show(old)} -> {_show(new)}"]
    if isinstance(old, list | None) and isinstance(new, list | None):
        was, now = _dicts(old), _dicts(new)
        old_named, new_named = _by_name(was), _by_name(now)
        if old_named is not None and new_named is not None:
            return [
                c
                for n in [*new_named, *(n for n in old_named if n not in new_named)]
                for c in (
                    [f"{path} {n} removed"]
                    if n not in new_named
                    else [f"{path} {n} added"]
                    if n not in old_named
                    else config_changes(old_named[n], new_named[n], f"{path}[{n}]")
                )
            ]
        return [f"{path} removed: {_brief(i)}" for i in was if i not in now] + [
            f"{path} added: {_brief(i)}" for i in now if i not in was
        ]
    return [f"{path} changes"]


def _admission(old: Obj | None, new: Obj | None) -> list[str]:
    if old is None:
        return ["added: it changes what the cluster admits"]
    if new is None:
        return ["removed: what it checked is no longer checked"]
    return config_changes(old.get("spec"), new.get("spec")) + config_changes(
        old.get("webhooks"), new.get("webhooks"), "webhooks"
    )


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
        for rule in _dicts((policy.get("spec") or {}).get(field))
        for peer in _or_any(_dicts(rule.get(side)))
        for port in _or_any(_dicts(rule.get("ports")))
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
    labels += [json.dumps(e, sort_keys=True) for e in _dicts(selector.get("matchExpressions"))]
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


def _policy_widening(old: Obj | None, new: Obj, names: dict[str, str], policed: bool) -> list[str]:
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


def _unprotected(old: list[Obj], new: list[Obj]) -> list[str]:
    """Namespaces that had NetworkPolicies and have none left, while still holding objects."""

    def with_policies(objects: list[Obj]) -> set[str]:
        return {key(o)[2] for o in objects if o.get("kind") == "NetworkPolicy"}

    used = {key(o)[2] for o in new} | {key(o)[3] for o in new if o.get("kind") == "Namespace"}
    return sorted((with_policies(old) - with_policies(new)) & used)


# --- Namespaces -----------------------------------------------------------------------------------

_ENFORCE = "pod-security.kubernetes.io/enforce"
_LEVELS = {"privileged": 0, "baseline": 1, "restricted": 2}  # no label: privileged


def _pod_security(old: Obj | None, new: Obj) -> list[str]:
    level = ((new.get("metadata") or {}).get("labels") or {}).get(_ENFORCE, "privileged")
    if old is None:
        return (
            [f"enforces Pod Security {level}"]
            if level == "privileged" and _ENFORCE in (new["metadata"].get("labels") or {})
            else []
        )
    was = ((old.get("metadata") or {}).get("labels") or {}).get(_ENFORCE, "privileged")
    return [f"enforces Pod Security {level} (was {was})"] if _LEVELS.get(level, 0) < _LEVELS.get(was, 0) else []


# --- Clusters -------------------------------------------------------------------------------------


def _object(k: tuple[str, str, str, str], old: Obj | None, new: Obj | None, context: dict[str, Any]) -> list[str]:
    group, kind = k[0], k[1]
    if kind in ADMISSION and group == "admissionregistration.k8s.io":
        return _admission(old, new)
    if new is None:
        return ["removed"] if kind == "NetworkPolicy" else []
    said = _pods(old, new)
    if group == "rbac.authorization.k8s.io":
        if kind in ("Role", "ClusterRole"):
            said += _rule_widening(old, new, kind)
        if kind == "ClusterRole":
            said += _aggregation(old, new, context["selectors"])
        if kind in ("RoleBinding", "ClusterRoleBinding"):
            said += _binding_widening(old, new)
    if kind == "NetworkPolicy" and group == "networking.k8s.io":
        said += _policy_widening(old, new, context["names"], k[2] in context["policed"])
    if kind == "Namespace" and not group:
        said += _pod_security(old, new)
    return said


def cluster_findings(cluster: str, before: list[Obj], after: list[Obj], names: dict[str, str]) -> list[Finding]:
    old = {key(o): o for o in before}
    new = {key(o): o for o in after}
    context = {
        "names": names,
        "policed": {k[2] for k in old if k[1] == "NetworkPolicy"},
        "selectors": {  # ClusterRoles that collect others' rules, by their selectors
            k[3]: _dicts((o.get("aggregationRule") or {}).get("clusterRoleSelectors"))
            for k, o in new.items()
            if k[1] == "ClusterRole" and k[3] and o.get("aggregationRule")
        },
    }
    added_namespaces = {k[3] for k in new if k[1] == "Namespace" and not k[0] and k not in old}
    out = []
    for k in [*new, *(k for k in old if k not in new)]:
        if old.get(k) == new.get(k):
            continue
        if said := _object(k, old.get(k), new.get(k), context):
            prefix = "new " if k not in old else ""
            fresh = k[2] if k not in old and k[2] in added_namespaces else ""
            out.append(Finding(cluster, f"{prefix}{label(k)} {'; '.join(said)}", fresh))
    out += [
        Finding(cluster, f"namespace {ns} has no NetworkPolicy left: all its traffic is admitted")
        for ns in _unprotected(before, after)
    ]
    return out


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


def _firewall(old_stack: Obj, new_stack: Obj, names: dict[str, str]) -> list[str]:
    def rules(stack: Obj) -> dict[str, Grant]:  # a disabled rule lets nothing through and refuses nothing
        items = (stack.get("resource") or {}).get(FIREWALL) or {}
        return {k: grant(b) for k, b in items.items() if not b.get("disabled")}

    old, new = rules(old_stack), rules(new_stack)
    out = []
    for k, g in new.items():
        if k not in old and g.action == "allow":
            out.append(f"new firewall rule {g.name} {describe(g, names)}")
        elif k in old and _widened(old[k], g):
            out.append(f"firewall rule {g.name} now {describe(g, names)} (was: {describe(old[k], names)})")
    out += [
        f"firewall rule {g.name} removed; it {describe(g, names)}"
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
        return _dicts(document.get("binding"))
    try:
        return _dicts(json.loads(str(policy_data)).get("bindings"))
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


def _iam(old_stack: Obj, new_stack: Obj) -> list[str]:
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


# --- Everything -----------------------------------------------------------------------------------


def security_findings(
    before_clusters: Clusters, after_clusters: Clusters, before_stacks: Stacks, after_stacks: Stacks
) -> list[Finding]:
    """Every change that widens access, per cluster (HEAD's clusters) then per stack (HEAD's stacks).

    A cluster or stack that HEAD removes takes its grants with it: nothing to flag there.
    """
    names = range_names(after_stacks, before_stacks)
    out = []
    for cluster, objects in after_clusters.items():
        out += cluster_findings(cluster, before_clusters.get(cluster, []), objects, names)
    for stack, body in after_stacks.items():
        old = before_stacks.get(stack, {})
        out += [Finding(stack, line) for line in [*_firewall(old, body, names), *_iam(old, body)]]
    return out
