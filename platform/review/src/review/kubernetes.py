"""What a change does to the objects Argo CD applies in each cluster.

Objects are compared by API group, kind, namespace and name. Flagged loudly:
CRD changes (including a new source or version for an application that
installs CRDs), namespace deletions, Warden policy changes, Kueue quota changes.
"""

from __future__ import annotations

import difflib
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
            flags.append(f"CRDs change: {name} source {old.get('targetRevision')} -> {new.get('targetRevision')}")
    if kind == "ClusterQueue" and group == "kueue.x-k8s.io":
        old, new = _quotas(before or {}), _quotas(after or {})
        moved = [
            f"{f}/{r} {old.get((f, r))} -> {new.get((f, r))}"
            for f, r in sorted(set(old) | set(new))
            if old.get((f, r)) != new.get((f, r))
        ]
        if moved:
            flags.append(f"Kueue quota of {name}: " + ", ".join(moved))
    return flags


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
                diff.objects.append(
                    ObjectDiff(k, "changed", compact_diff(old[k], new[k]), _flags(k, "changed", old[k], new[k]))
                )
        if diff.objects:
            out.append(diff)
    return out
