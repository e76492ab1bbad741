"""Roles and bindings: verbs, resources and subjects granted beyond the old side."""

from __future__ import annotations

import json

from review.kubernetes import Obj
from review.security.common import dicts, listed

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


def rule_widening(old: Obj | None, new: Obj, kind: str) -> list[str]:
    old_rules = dicts((old or {}).get("rules"))
    out = []
    for rule in dicts(new.get("rules")):
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
            said.setdefault((listed(newly, "every verb"), "" if url else group or "core", url), []).append(
                group if url else resource
            )
        named = f" named {', '.join(map(str, rule['resourceNames']))}" if rule.get("resourceNames") else ""
        for (granted, group, url), what in said.items():
            where = (
                f"URLs {listed(what, 'every URL')}"
                if url
                else f"{listed(what, 'every resource')}{named} in {listed([group], 'every API group')}"
            )
            out.append(f"grants {granted} on {where}")
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


def aggregation_widening(old: Obj | None, new: Obj, selectors: dict[str, list[Obj]]) -> list[str]:
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


def binding_widening(old: Obj | None, new: Obj) -> list[str]:
    ref = new.get("roleRef") or {}
    role = f"{ref.get('kind')} {ref.get('name')}"
    out = []
    if old is not None and (old.get("roleRef") or {}) != ref:
        was = old.get("roleRef") or {}
        out.append(f"now refers to {role} (was {was.get('kind')} {was.get('name')})")
    before = [] if old is None or (old.get("roleRef") or {}) != ref else dicts(old.get("subjects"))
    if added := [_subject(s) for s in dicts(new.get("subjects")) if s not in before]:
        out.append(f"grants {role} to {', '.join(added)}")
    return out
