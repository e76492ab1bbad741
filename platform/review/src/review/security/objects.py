"""Default deny: a change to any Kubernetes object is for a code owner, unless the review knows it is harmless.

The rules of the security class (pods.py, rbac.py, admission.py, netpol.py) each read what they know. What
none of them knew (a second container in Warden's pod, a Service made a LoadBalancer, seccomp
`Unconfined`, a line appended to a script every GPU container sources, a label an admission policy
selects on, an Argo CD setting) used to be exit 0. Here every object of both sides is compared field by
field (list items by name, documents embedded in strings, a ConfigMap's JSON say, parsed), and each
changed field is listed with before -> after unless an entry of KNOWN covers it: a field another rule
judges (it reports what widens, so its silence means "narrower or the same"), or one that is harmless,
each with why. Everything else is listed: a new object, a removed one, a new field, whatever its kind.

Labels: a label key that an admission policy or binding, a NetworkPolicy, or Kueue (a queue's
namespaceSelector, the manager's managedJobsNamespaceSelector) selects on, on either side, is
security: the keys come from those objects themselves (selectors and the string literals of CEL
expressions), never from a list here. Pod Security admission, built into the API server, reads
`pod-security.kubernetes.io/*`.

Pure: objects in, lines out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from contract import names
from contract.registry import REGISTRY_CONFIGMAP, REGISTRY_NAMESPACE
from review.kubernetes import Obj
from review.kubernetes import text as plain
from review.security.admission import ADMISSION
from review.security.common import dicts
from review.security.fields import MISSING, Missing, Path, by_name, changes, document, item_key
from review.security.quotas import KUEUE, QUEUE_KINDS, ClusterPlan, judges_resource_quota
from review.versions import split_image

Key = tuple[str, str, str, str]  # API group, kind, namespace, name (review.kubernetes.key)


# --- What each cluster's objects say --------------------------------------------------------------

_LITERAL = re.compile(r"""["']([A-Za-z0-9][A-Za-z0-9._/-]{0,252})["']""")
_POD_SECURITY = "pod-security.kubernetes.io/"


def _selector_keys(value: Any) -> Iterator[str]:
    """Label keys of every label selector in a value (matchLabels, matchExpressions)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if str(k).lower().endswith("selector") and isinstance(v, dict):
                labels = v.get("matchLabels")
                yield from map(str, labels if isinstance(labels, dict) else {})
                yield from (str(e.get("key")) for e in dicts(v.get("matchExpressions")))
            yield from _selector_keys(v)
    elif isinstance(value, list):
        for v in value:
            yield from _selector_keys(v)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def selected_labels(objects: list[Obj]) -> dict[str, set[str]]:
    """Label key -> who selects on it: admission configuration (its selectors, and any string literal of its
    CEL expressions), NetworkPolicies, Kueue's objects, and Kueue's manager configuration wherever an
    Argo CD Application embeds it (Helm values)."""
    out: dict[str, set[str]] = {}
    for o in objects:
        group, kind = str(o.get("apiVersion", "")).rpartition("/")[0], str(o.get("kind"))
        if group == "admissionregistration.k8s.io" and kind in ADMISSION:
            who, keys = (
                "admission policies",
                {*_selector_keys(o), *(m for s in _strings(o) for m in _LITERAL.findall(s))},
            )
        elif group == "networking.k8s.io" and kind == "NetworkPolicy":
            who, keys = "NetworkPolicies", set(_selector_keys(o))
        elif group == KUEUE:
            who, keys = "Kueue queues", set(_selector_keys(o))
        elif group == "argoproj.io" and kind == "Application":
            who, keys = "Kueue's manager configuration", set(_selector_keys(_kueue_configs(o)))
        else:
            continue
        for key in keys:
            out.setdefault(key, set()).add(who)
    return out


def _kueue_configs(o: Obj) -> list[Obj]:
    docs = [document(s) for s in _strings(o)]
    return [
        d for d in docs if isinstance(d, dict) and str(d.get("apiVersion", "")).startswith("config.kueue.x-k8s.io/")
    ]


def _pod_specs(value: Any, path: Path = ()) -> Iterator[tuple[Path, Obj]]:
    """Where an object embeds pod specs (a `spec` with a `containers` list, as pods.pod_specs finds them),
    by their path in `changes`."""
    if isinstance(value, dict):
        if path and path[-1] == "spec" and isinstance(value.get("containers"), list):
            yield path, value
            return
        for k, v in value.items():
            yield from _pod_specs(v, (*path, str(k)))
    elif isinstance(value, list):
        named = by_name(value)
        for i, item in enumerate(value):
            yield from _pod_specs(item, (*path, f"[{item_key(item) if named is not None else i}]"))


def _registry_read(objects: list[Obj]) -> list[str]:
    """What in the cluster reads the registry ConfigMap's contents itself: a pod in its namespace that
    mounts it or takes it as environment, an account of the namespace bound to a role there, or an
    admission binding taking it as parameters. (gkr reads it from people's laptops: not enforcing.)"""
    out = []
    for o in objects:
        meta = o.get("metadata") or {}
        if meta.get("namespace") == REGISTRY_NAMESPACE and any(  # any mention: a volume, env, a projection
            REGISTRY_CONFIGMAP in json.dumps(spec) for _, spec in _pod_specs(o)
        ):
            out.append(f"{o.get('kind')} {meta.get('name')}")
        if meta.get("namespace") == REGISTRY_NAMESPACE and any(
            s.get("kind") == "ServiceAccount" for s in dicts(o.get("subjects"))
        ):
            out.append(f"{o.get('kind')} {meta.get('name')}")
        if ((o.get("spec") or {}).get("paramRef") or {}).get("name") == REGISTRY_CONFIGMAP:
            out.append(f"{o.get('kind')} {meta.get('name')}")
    return out


@dataclass(frozen=True)
class Context:
    """One cluster, both sides: what the known-harmless entries need to decide."""

    selected: dict[str, set[str]] = field(default_factory=dict)  # label key -> who selects on it
    registry_readers: list[str] = field(default_factory=list)
    plan: ClusterPlan | None = None  # HEAD's fleet plan for the cluster (quotas.py)
    remachined: frozenset[str] = frozenset()  # GPU pools whose machine type the plans change (or new, or gone)


def context(before: list[Obj], after: list[Obj], plans: tuple[ClusterPlan | None, ClusterPlan | None]) -> Context:
    selected = selected_labels(before)
    for key, who in selected_labels(after).items():
        selected.setdefault(key, set()).update(who)
    was, now = (p.machines if p else {} for p in plans)
    remachined = frozenset(pool for pool in {*was, *now} if was.get(pool) != now.get(pool))
    return Context(selected, _registry_read(before) + _registry_read(after), plans[1], remachined)


# --- Known harmless -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Leaf:
    """One changed field of one object."""

    key: Key
    path: Path
    rel: Path  # the path inside its pod spec, or `path` outside one
    pod: Path | None  # the pod spec's path, when the field is in one
    before: Any
    after: Any
    host_volumes: frozenset[str]  # the pod's hostPath volumes, on either side (pods.py judges them)
    removed: bool  # the whole object is removed
    item: Path | None = None  # the list item one side has none of (Change.item)


def _like(path: Path, pattern: Path) -> bool:
    """`*` any one key, `[*]` any list item, `**` (last) anything below."""
    for i, want in enumerate(pattern):
        if want == "**":
            return True  # and anything below, or nothing
        if i >= len(path):
            return False
        got = path[i]
        if not (want == got or (want == "*" and not got.startswith("[")) or (want == "[*]" and got.startswith("["))):
            return False
    return len(path) == len(pattern)


_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
# pods.py reads these (pod_widening): each widening is its finding, narrowing says nothing.
_POD_JUDGED = [
    ("hostNetwork",),
    ("hostPID",),
    ("hostIPC",),
    ("automountServiceAccountToken",),
    ("serviceAccountName",),
    ("serviceAccount",),
    ("securityContext", "runAsUser"),
    ("securityContext", "runAsNonRoot"),
    *(
        (c, "[*]", "securityContext", f)
        for c in _CONTAINER_LISTS
        for f in ("privileged", "allowPrivilegeEscalation", "runAsUser", "runAsNonRoot", "readOnlyRootFilesystem")
    ),
    *((c, "[*]", "securityContext", "capabilities", f, "**") for c in _CONTAINER_LISTS for f in ("add", "drop")),
    *((c, "[*]", "ports", "[*]", "hostPort") for c in _CONTAINER_LISTS),
]


def _pod_judged(leaf: Leaf, _: Context) -> bool:
    if leaf.pod is None:
        return False
    rel = leaf.rel
    if any(_like(rel, p) for p in _POD_JUDGED):
        return True
    # A hostPath volume and its mounts: pods.py reports a new, moved or writable host path.
    if _like(rel, ("volumes", "[*]", "**")) and rel[1][1:-1] in leaf.host_volumes:
        return True
    return any(
        _like(rel, (c, "[*]", "volumeMounts", "[*]", "**")) and rel[3][1:-1] in leaf.host_volumes
        for c in _CONTAINER_LISTS
    )


def _image_pin(leaf: Leaf, _: Context) -> bool:
    # The same image at another pin. A container that is new or gone is listed whole (its name is not known
    # harmless), and another image is other code, even where versions.py lists it as a pin.
    if leaf.path[-1] != "image" or not isinstance(leaf.before, str) or not isinstance(leaf.after, str):
        return False
    return split_image(leaf.before)[0] == split_image(leaf.after)[0]


def _container_port(leaf: Leaf, _: Context) -> bool:
    return leaf.pod is not None and any(
        _like(leaf.rel, (c, "[*]", "ports", "[*]", f))
        for c in _CONTAINER_LISTS
        for f in ("containerPort", "name", "protocol")
    )


def _group_kind(leaf: Leaf) -> tuple[str, str]:
    return leaf.key[0], leaf.key[1]


def _rbac(leaf: Leaf, _: Context) -> bool:
    return _group_kind(leaf)[0] == "rbac.authorization.k8s.io" and leaf.path[0] in (
        "rules",
        "aggregationRule",
        "subjects",
        "roleRef",
    )


def _admission(leaf: Leaf, _: Context) -> bool:
    group, kind = _group_kind(leaf)
    return group == "admissionregistration.k8s.io" and kind in ADMISSION and leaf.path[0] in ("spec", "webhooks")


def _network_policy(leaf: Leaf, _: Context) -> bool:
    return _group_kind(leaf) == ("networking.k8s.io", "NetworkPolicy") and leaf.path[0] == "spec"


def _label_key(leaf: Leaf) -> str | None:
    return leaf.path[-1] if len(leaf.path) >= 2 and leaf.path[-2] == "labels" else None


def _enforce_level(leaf: Leaf, _: Context) -> bool:
    return _group_kind(leaf) == ("", "Namespace") and leaf.path == ("metadata", "labels", f"{_POD_SECURITY}enforce")


def _version(value: Any) -> tuple[int, ...] | None:
    if value == "latest":
        return (10**9,)
    text = str(value).removeprefix("v")
    parts = text.split(".")
    return tuple(map(int, parts)) if all(p.isdigit() and len(p) < 6 for p in parts) else None


def _pod_security_version_raised(leaf: Leaf, _: Context) -> bool:
    key = _label_key(leaf)
    if key is None or not key.startswith(_POD_SECURITY) or not key.endswith("-version"):
        return False
    was, now = _version(leaf.before), _version(leaf.after)
    return was is not None and now is not None and now >= was


def _unselected_label(leaf: Leaf, ctx: Context) -> bool:
    key = _label_key(leaf)
    return key is not None and not key.startswith(_POD_SECURITY) and key not in ctx.selected


def _checkov(leaf: Leaf, _: Context) -> bool:
    return (
        len(leaf.path) == 3 and leaf.path[:2] == ("metadata", "annotations") and leaf.path[2].startswith("checkov.io/")
    )


def _quotas(leaf: Leaf, ctx: Context) -> bool:
    group, kind = _group_kind(leaf)
    if group == KUEUE and kind in QUEUE_KINDS:
        return leaf.path[:2] == ("spec", "resourceGroups")
    if group == KUEUE and kind == "WorkloadPriorityClass":
        return leaf.path == ("value",)
    if (group, kind) == ("", "ResourceQuota"):
        return (
            len(leaf.path) == 3
            and leaf.path[:2] == ("spec", "hard")
            and judges_resource_quota(leaf.key, leaf.path[2], ctx.plan)
        )
    return False


def _queue_removed(leaf: Leaf, _: Context) -> bool:
    return leaf.removed and _group_kind(leaf) in ((KUEUE, "ClusterQueue"), (KUEUE, "LocalQueue"))


def _registry(leaf: Leaf, ctx: Context) -> bool:
    return (
        leaf.key == ("", "ConfigMap", REGISTRY_NAMESPACE, REGISTRY_CONFIGMAP)
        and leaf.path[0] in ("data", "binaryData")
        and not ctx.registry_readers
    )


def _machine_thresholds(leaf: Leaf, ctx: Context) -> bool:
    # Warden's config (contract.warden): per GPU pool, facts of its machine type from the machine catalog.
    return (
        leaf.key == ("", "ConfigMap", names.WARDEN_NAMESPACE, names.WARDEN_CONFIGMAP)
        and _like(leaf.path, ("data", "*", "pools", "*", "**"))
        and leaf.path[3] in ctx.remachined
    )


def _revision(leaf: Leaf, _: Context) -> bool:
    return (
        _group_kind(leaf) == ("argoproj.io", "Application")
        and leaf.path[-1] in ("targetRevision", "repoURL")
        and (_like(leaf.path, ("spec", "source", "*")) or _like(leaf.path, ("spec", "sources", "[*]", "*")))
    )


@dataclass(frozen=True)
class Known:
    fields: str  # which fields, in words
    why: str  # why a change there needs no owner from this rule
    covers: Callable[[Leaf, Context], bool]


KNOWN: tuple[Known, ...] = (
    Known(
        "pod privileges: host namespaces and paths, security switches, capabilities, host ports, the account",
        "judged by pods.py: each widening is a finding of its own",
        _pod_judged,
    ),
    Known(
        "RBAC rules, aggregation, subjects and roleRef", "judged by rbac.py: each grant beyond BASE is a finding", _rbac
    ),
    Known("webhook configurations' and admission policies' spec", "admission.py lists any change", _admission),
    Known(
        "NetworkPolicies' spec",
        "judged by netpol.py: each peer or port admitted beyond BASE is a finding",
        _network_policy,
    ),
    Known("a Namespace's Pod Security enforce level", "pods.py reports a lowered level", _enforce_level),
    Known(
        "an image's pin (tag, digest), its repository unchanged",
        "the Versions section lists each pin; a weaker one needs an owner (versions.py)",
        _image_pin,
    ),
    Known(
        "Argo CD sources' repository and revision",
        "the Versions section lists them, for an owner (versions.py)",
        _revision,
    ),
    Known(
        "Kueue quotas, team ResourceQuotas, WorkloadPriorityClass values",
        "compared with the fleet plan (quotas.py): what it does not explain is a finding",
        _quotas,
    ),
    Known(
        "labels that no admission policy, NetworkPolicy or Kueue selects on",
        "a label decides access only through what selects on it (module doc)",
        _unselected_label,
    ),
    Known(
        "Pod Security `*-version` labels raised",
        "a newer version of the same standard checks no less",
        _pod_security_version_raised,
    ),
    Known(
        "containers' ports: containerPort, name, protocol",
        "informational: listing a port neither opens nor closes it (Kubernetes API, Container.ports)",
        _container_port,
    ),
    Known("`checkov.io/` annotations", "read only by `make test`'s checkov scan, never by a cluster", _checkov),
    Known("a ClusterQueue or LocalQueue removed", "nothing is admitted through a queue that is gone", _queue_removed),
    Known(
        "Warden's per-pool machine facts (`pools.<pool>`) of a pool whose machine type the fleet plan changes",
        "the machine catalog's numbers for the new machine type; the pool's change is in Capacity",
        _machine_thresholds,
    ),
    Known(
        "the registry ConfigMap's data, while nothing in the cluster reads it",
        "gkr reads it on people's laptops; quotas and policies are enforced by Kueue and admission",
        _registry,
    ),
)


# --- Lines ----------------------------------------------------------------------------------------

SHOWN = 6  # changed fields per object in its line; the full report's object diff has all of them
_VALUE = 70  # characters of a value
_LINE = 120  # of a script's line, or of what a new list item holds


def _join(path: Path) -> str:
    return "".join(s if s.startswith("[") else f".{s}" for s in path).lstrip(".")


def _short(value: Any, limit: int = _VALUE) -> str:
    if value is MISSING:
        return "(absent)"
    text = ", ".join(plain(v) for v in value) if isinstance(value, list) else plain(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _listed(values: list[Any]) -> str:
    shown = ", ".join(_short(v) for v in values[:2])
    return shown + (f" and {len(values) - 2} more" if len(values) > 2 else "")


def _shown(path: str, before: Any, after: Any) -> str:
    if isinstance(before, str) and isinstance(after, str) and ("\n" in before or "\n" in after):
        was, now = before.splitlines(), after.splitlines()
        added = [line.strip() for line in now if line not in was]
        gone = [line.strip() for line in was if line not in now]
        said = (
            [f"adds line {_short(added[0], _LINE)}" + (f" (and {len(added) - 1} more)" if len(added) > 1 else "")]
            if added
            else []
        )
        said += (
            [f"removes line {_short(gone[0], _LINE)}" + (f" (and {len(gone) - 1} more)" if len(gone) > 1 else "")]
            if gone
            else []
        )
        return f"{path} {', '.join(said) or 'changes'}"
    if isinstance(before, list | Missing) and isinstance(after, list | Missing):
        a, b = before if isinstance(before, list) else [], after if isinstance(after, list) else []
        plus, minus = [v for v in b if v not in a], [v for v in a if v not in b]
        parts = ([f"+ {_listed(plus)}"] if plus else []) + ([f"- {_listed(minus)}"] if minus else [])
        return f"{path}: {'; '.join(parts) or 'reordered'}"
    return f"{path}: {_short(before)} -> {_short(after)}"


def _where(leaf: Leaf, upto: int) -> str:
    """The field's path as the reader knows it: inside a pod spec, pods.py's short pod path and the rest."""
    if leaf.pod is not None and upto > len(leaf.pod):
        pod = _join(tuple(s for s in leaf.pod if s not in ("spec", "template")))
        return f"{pod + ' ' if pod else ''}{_join(leaf.path[len(leaf.pod) : upto])}"
    return _join(leaf.path[:upto])


_IDENTITY = (("kind",), ("metadata", "name"), ("metadata", "namespace"))  # the object's key, compared already


def fields(k: Key, old: Obj | None, new: Obj | None, ctx: Context) -> list[tuple[Leaf, bool]]:
    """Every changed field of the object, and whether an entry of KNOWN covers it."""
    host: dict[Path, frozenset[str]] = {}  # each pod spec's hostPath volumes, on either side
    for side in (old or {}, new or {}):
        for path, spec in _pod_specs(side):
            volumes = {str(v.get("name")) for v in dicts(spec.get("volumes")) if isinstance(v.get("hostPath"), dict)}
            host[path] = host.get(path, frozenset()) | volumes
    identity = [*_IDENTITY, *([("apiVersion",)] if old is None or new is None else [])]
    out = []
    for change in changes(old, new):
        if change.path in identity:
            continue
        pod = next((p for p in host if change.path[: len(p)] == p), None)
        leaf = Leaf(
            k,
            change.path,
            change.path[len(pod) :] if pod else change.path,
            pod,
            change.before,
            change.after,
            host.get(pod, frozenset()) if pod else frozenset(),
            new is None,
            change.item,
        )
        out.append((leaf, any(known.covers(leaf, ctx) for known in KNOWN)))
    return out


def _label_line(leaf: Leaf, ctx: Context) -> str | None:
    key = _label_key(leaf)
    if key is None or leaf.item is not None:
        return None
    who = sorted(ctx.selected.get(key, set()))
    if key.startswith(_POD_SECURITY):
        who.append("Pod Security admission")
    where = _where(leaf, len(leaf.path) - 2)
    where = "" if where == "metadata" else f"{where} "
    return f"{where}label {key}: {_short(leaf.before)} -> {_short(leaf.after)} (selected by {', '.join(who)})"


def _location(leaf: Leaf) -> str:
    """Where in a new or removed object an unknown field sits: its list item, or its first key or two."""
    if leaf.item is not None:
        return _where(leaf, len(leaf.item))
    if leaf.pod is not None:
        return _where(leaf, len(leaf.pod) + 1)
    return _where(leaf, min(len(leaf.path), 2))


def unknown_lines(k: Key, old: Obj | None, new: Obj | None, ctx: Context) -> list[str]:
    """What changed that the review does not know to be harmless. A new or removed object: one entry, where
    its unknown fields sit. A changed one: one entry per field, before -> after; a list item one side has
    none of (a container, a patch) once, with its unknown fields. At most SHOWN entries."""
    unknown = [leaf for leaf, known in fields(k, old, new, ctx) if not known]
    if not unknown:
        return []
    if old is None or new is None:
        places = list(dict.fromkeys(_location(leaf) for leaf in unknown))
        shown = ", ".join(places[:SHOWN]) + (f" and {len(places) - SHOWN} more" if len(places) > SHOWN else "")
        return [f"{'added' if old is None else 'removed'}: {shown}"]
    said: list[str] = []
    items: dict[Path, list[Leaf]] = {}
    for leaf in unknown:
        if leaf.item is None:
            said.append(_label_line(leaf, ctx) or _shown(_where(leaf, len(leaf.path)), leaf.before, leaf.after))
            continue
        if leaf.item not in items:
            said.append("")  # its place: filled below, with what the item holds
        items.setdefault(leaf.item, []).append(leaf)
    entries = iter(items.items())
    said = [line or _item_line(*next(entries)) for line in said]
    if len(said) > SHOWN:
        said = [*said[:SHOWN], f"and {len(said) - SHOWN} more changed fields"]
    return said


def _item_line(item: Path, leaves: list[Leaf]) -> str:
    first = leaves[0]
    added = first.before is MISSING
    held = ", ".join(
        f"{_join(leaf.path[len(item) :]) or 'value'}: {_short(leaf.after if added else leaf.before)}"
        for leaf in leaves
        # Its name is in its path; a kind and API version say less than what the item sets.
        if leaf.path[len(item) :] != ("name",) and leaf.path[-1] not in ("kind", "apiVersion")
    )
    held = held if len(held) <= 2 * _LINE else held[: 2 * _LINE - 3] + "..."
    return f"{_where(first, len(item))} {'added' if added else 'removed'}" + (f" ({held})" if held else "")
