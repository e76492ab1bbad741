"""What a change does to the objects Argo CD applies in each cluster.

Objects are compared by API group, kind, namespace and name. Flagged loudly:
CRD changes (including a new source or version for an application that
installs CRDs), namespace deletions, Warden policy changes, Kueue quota changes.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import Any

import yaml

from contract import names

Obj = dict[str, Any]
Clusters = dict[str, list[Obj]]  # cluster -> every object it gets (Argo CD tree included)
CRD_APPS = ("kuberay-crds", "kueue")


def key(o: Obj) -> tuple[str, str, str, str]:
    meta = o.get("metadata", {})
    return (
        str(o.get("apiVersion", "")).rpartition("/")[0],
        str(o.get("kind")),
        str(meta.get("namespace", "")),
        str(meta.get("name")),
    )


def label(k: tuple[str, str, str, str]) -> str:
    group, kind, namespace, name = k
    return f"{kind}{'.' + group if group else ''} {namespace + '/' if namespace else ''}{name}"


@dataclass
class ObjectDiff:
    key: tuple[str, str, str, str]
    action: str  # added, removed, changed
    diff: str = ""  # compact unified diff of the YAML
    changes: list[str] = field(default_factory=list)  # a ConfigMap's data, key by key, JSON parsed (data_changes)
    flags: list[str] = field(default_factory=list)


@dataclass
class ClusterDiff:
    cluster: str
    objects: list[ObjectDiff] = field(default_factory=list)

    @property
    def flagged(self) -> list[ObjectDiff]:
        return [o for o in self.objects if o.flags]


def _yaml(o: Obj) -> list[str]:
    return yaml.safe_dump(o, sort_keys=True, width=120).splitlines()


def compact_diff(before: Obj, after: Obj, limit: int = 40) -> str:
    lines = list(difflib.unified_diff(_yaml(before), _yaml(after), lineterm="", n=1))[2:]
    if len(lines) > limit:
        lines = [*lines[:limit], f"... {len(lines) - limit} more lines"]
    return "\n".join(lines)


def _quotas(queue: Obj) -> dict[tuple[str, str], Any]:
    out = {}
    for group in queue.get("spec", {}).get("resourceGroups", []):
        for flavor in group.get("flavors", []):
            for resource in flavor.get("resources", []):
                out[(flavor["name"], resource["name"])] = resource.get("nominalQuota")
    return out


def text(value: Any) -> str:
    """A value as YAML and JSON write it, never a Python repr: none, true, false, 3, a string as it is."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _leaves(value: Any, path: str = "") -> dict[str, Any]:
    """Leaf values by readable path: list items by their `name` when they have one ("regions[us-east4]")."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out |= _leaves(v, f"{path}.{k}" if path else str(k))
        return out
    if isinstance(value, list) and value:
        out = {}
        for i, item in enumerate(value):
            named = isinstance(item, dict) and isinstance(item.get("name"), str)
            out |= _leaves(item, f"{path}[{item['name'] if named else i}]")
        return out
    return {path: value}


def _parsed(value: Any) -> Any:
    try:
        return json.loads(value) if isinstance(value, str) else None
    except ValueError:
        return None


def data_changes(before: Obj, after: Obj) -> list[str]:
    """A ConfigMap's data, compared key by key; a value holding JSON is parsed and compared field by field
    ("registry.json: regions[us-east4].gpu_pools[h200-a].nodes: 384 -> 448"), never as escaped text."""
    old, new = before.get("data") or {}, after.get("data") or {}
    out = []
    for key in [*new, *(k for k in old if k not in new)]:
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        pa, pb = _parsed(a), _parsed(b)
        if pa is None or pb is None:
            out.append(f"{key}: " + ("added" if a is None else "removed" if b is None else "changed"))
            continue
        la, lb = _leaves(pa), _leaves(pb)
        out += [
            f"{key}: {p}: {text(la.get(p)) if p in la else '(absent)'} -> {text(lb.get(p)) if p in lb else '(absent)'}"
            for p in [*lb, *(p for p in la if p not in lb)]
            if la.get(p, ...) != lb.get(p, ...)
        ]
    return out


def _quota_flag(kind: str, name: str, action: str, before: Obj | None, after: Obj | None) -> list[str]:
    old, new = _quotas(before or {}), _quotas(after or {})
    whose = f"cohort {name}" if kind == "Cohort" else name
    if action != "changed":  # a queue that comes or goes: its quota, without "none" on one side
        held = ", ".join(f"{f}/{r} {text(q)}" for (f, r), q in sorted((new or old).items()))
        return [f"Kueue quota of {whose} {action}" + (f": {held}" if held else "")]
    moved = [
        f"{f}/{r} {text(old.get((f, r)))} -> {text(new.get((f, r)))}"
        for f, r in sorted(set(old) | set(new))
        if old.get((f, r)) != new.get((f, r))
    ]
    return [f"Kueue quota of {whose}: " + ", ".join(moved)] if moved else []


def _flags(k: tuple[str, str, str, str], action: str, before: Obj | None, after: Obj | None) -> list[str]:
    group, kind, _, name = k
    flags = []
    if kind == "CustomResourceDefinition":
        flags.append(f"CRD {action}: every custom resource of this kind depends on it")
    if kind == "Namespace" and action == "removed":
        flags.append(f"namespace {name} is deleted, and everything in it")
    if kind == "ConfigMap" and name == names.WARDEN_CONFIGMAP:
        flags.append("Warden's policy changes")
    if kind == "Application" and name in CRD_APPS and action != "added":
        old = (before or {}).get("spec", {}).get("source", {})
        new = (after or {}).get("spec", {}).get("source", {})
        if old != new:
            was, now = text(old.get("targetRevision")), text(new.get("targetRevision"))
            flags.append(
                f"CRDs change: {name} removed (was source {was})"
                if not new
                else f"CRDs change: {name} source {was} -> {now}"
            )
    if kind in ("ClusterQueue", "Cohort") and group == "kueue.x-k8s.io":
        flags += _quota_flag(kind, name, action, before, after)
    return flags


def _changed(k: tuple[str, str, str, str], before: Obj, after: Obj) -> ObjectDiff:
    """A ConfigMap's data key by key (data_changes), the rest of it, and any other object, as a YAML diff."""
    data = data_changes(before, after) if k[1] == "ConfigMap" else []
    if data:
        rest = {**before, "data": None}, {**after, "data": None}
        shown = compact_diff(*rest) if rest[0] != rest[1] else ""
    else:
        shown = compact_diff(before, after)
    return ObjectDiff(k, "changed", shown, flags=_flags(k, "changed", before, after), changes=data)


def diff_clusters(before: Clusters, after: Clusters) -> list[ClusterDiff]:
    out = []
    for cluster in [*after, *(c for c in before if c not in after)]:
        old = {key(o): o for o in before.get(cluster, [])}
        new = {key(o): o for o in after.get(cluster, [])}
        diff = ClusterDiff(cluster)
        for k in [*new, *(k for k in old if k not in new)]:
            if k not in old:
                diff.objects.append(ObjectDiff(k, "added", flags=_flags(k, "added", None, new[k])))
            elif k not in new:
                diff.objects.append(ObjectDiff(k, "removed", flags=_flags(k, "removed", old[k], None)))
            elif old[k] != new[k]:
                diff.objects.append(_changed(k, old[k], new[k]))
        if diff.objects:
            out.append(diff)
    return out
