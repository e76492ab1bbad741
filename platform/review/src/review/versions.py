"""Which versions a change moves: control planes, node pools, Argo CD sources (charts) and images.

The Terraform estimate compares resources only, but a control plane's version is
usually a lookup in a `google_container_engine_versions` data source: a new
`versions.kubernetes` changes nothing but that data source's `version_prefix`.
Here each cluster's version is resolved through the data sources its
`min_master_version` names. Identical changes in several clusters are one entry.
Only clusters, stacks and node pools on both sides are compared: what a change
creates or deletes is the Terraform and Kubernetes diffs' to report.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from review.kubernetes import Clusters, Obj
from review.terraform import Stacks, exclusions, flatten

_DATA_REF = re.compile(r"\bdata\.([\w-]+)\.([\w-]+)")
_CLUSTER_REF = re.compile(r"\$\{google_container_cluster\.([\w-]+)\.")
_UNPINNED = "latest (no tag)"


@dataclass(frozen=True)
class VersionChange:
    what: str  # "control plane", "GPU node pools", "node pool h200-a", "chart kueue", "image warden"
    where: tuple[str, ...]  # clusters (or Terraform stacks) where this same change happens
    before: str | None  # None: not there before
    after: str | None  # None: gone after
    note: str = ""
    approval: bool = False  # needs an owner's approval before it merges
    repository: str = ""  # an image's repository (`registry/path/name`): review.images adds to its note

    def line(self) -> str:
        """ "control plane of meridian-us-central1, meridian-us-east4: 1.35 -> 1.36 (through ...)"."""
        note = f" ({self.note})" if self.note else ""
        return f"{self.what} of {', '.join(self.where)}: {self.before or '(none)'} -> {self.after or '(none)'}{note}"


def is_upgrade_risk(changes: Iterable[VersionChange]) -> bool:
    return any(c.approval for c in changes)


def version_changes(
    before_stacks: Stacks,
    after_stacks: Stacks,
    before_clusters: Clusters,
    after_clusters: Clusters,
    *,
    now: datetime | None = None,
) -> list[VersionChange]:
    """Every version change, grouped; `now` decides which maintenance exclusions are in force."""
    now = now or datetime.now(UTC)
    found: list[tuple[str, VersionChange]] = []
    for stack in (s for s in after_stacks if s in before_stacks):
        found += _stack_changes(stack, before_stacks[stack], after_stacks[stack], now)
    found += _chart_changes(before_clusters, after_clusters)
    found += _image_changes(before_clusters, after_clusters)
    found += _image_changes(
        {s: list(_bodies(stack)) for s, stack in before_stacks.items()},
        {s: list(_bodies(stack)) for s, stack in after_stacks.items()},
    )
    return _grouped(found)


def gpu_hold(cluster: dict[str, Any], now: datetime) -> str:
    """Whether the cluster's maintenance exclusions keep automatic node upgrades off its GPU pools now."""
    lasting = [
        (name, e) for name, e in exclusions(cluster).items() if e.holds >= 1 and (e.end is None or _time(e.end) > now)
    ]
    active = [(name, e) for name, e in lasting if e.start is None or _time(e.start) <= now]
    if active:
        name, e = max(active, key=lambda item: _time(item[1].end) if item[1].end else datetime.max.replace(tzinfo=UTC))
        return f"GPU node pools held back by exclusion {name} until {e.end or 'end of support'}"
    if lasting:
        name, e = min(lasting, key=lambda item: _time(str(item[1].start)))
        return f"NOT held back: node upgrades reach GPU pools until exclusion {name} starts at {e.start}"
    return "NOT held back: node upgrades reach GPU pools"


# Terraform: control planes and node pools


def _stack_changes(
    stack: str, before: dict[str, Any], after: dict[str, Any], now: datetime
) -> Iterator[tuple[str, VersionChange]]:
    old_clusters = _of_kind(before, "google_container_cluster")
    new_clusters = _of_kind(after, "google_container_cluster")
    for address, cluster in new_clusters.items():
        if address not in old_clusters:
            continue
        where = str(cluster.get("name", address))
        old_version, old_facts = _control_plane(before, old_clusters[address])
        new_version, new_facts = _control_plane(after, cluster)
        if old_facts != new_facts:
            old_text, new_text = old_version, new_version
            if old_version == new_version and old_facts["release channel"] != new_facts["release channel"]:
                old_text += f" on {old_facts['release channel']}"
                new_text += f" on {new_facts['release channel']}"
            yield where, VersionChange("control plane", (), old_text, new_text, _through(old_facts, new_facts), True)
        if old_version != new_version and _following_gpu_pools(after, address):
            note = f"auto-upgrade follows the control plane; {gpu_hold(cluster, now)}"
            yield where, VersionChange("GPU node pools", (), old_version, new_version, note, True)
        if old_clusters[address].get("node_version") != cluster.get("node_version"):
            old_nodes, new_nodes = old_clusters[address].get("node_version"), cluster.get("node_version")
            yield where, VersionChange("default node version", (), _text(old_nodes), _text(new_nodes), "", True)
    old_pools = _of_kind(before, "google_container_node_pool")
    for address, pool in _of_kind(after, "google_container_node_pool").items():
        if address not in old_pools:
            continue
        old, new = _node_facts(old_pools[address]), _node_facts(pool)
        moved = [k for k in dict.fromkeys([*old, *new]) if old.get(k) != new.get(k)]
        if not moved:
            continue
        reference = _CLUSTER_REF.search(str(pool.get("cluster", "")))
        cluster = new_clusters.get(reference.group(1), {}) if reference else {}
        note = ""
        if _is_gpu(pool) and "version" in moved:
            # Exclusions hold back GKE's automatic upgrades, never a version Terraform sets.
            note = "applied by Terraform: maintenance exclusions do not hold it back"
        elif _is_gpu(pool):
            note = gpu_hold(cluster, now)
        change = VersionChange(
            f"node pool {pool.get('name', address)}",
            (),
            ", ".join(_fact(k, old.get(k)) for k in moved),
            ", ".join(_fact(k, new.get(k)) for k in moved),
            note,
            True,
        )
        yield str(cluster.get("name", stack)), change


def _of_kind(stack: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    items: dict[str, dict[str, Any]] = stack.get("resource", {}).get(kind, {})
    return items


def _control_plane(stack: dict[str, Any], cluster: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The version as a reader says it ("1.35"), and every fact that decides it."""
    expression = cluster.get("min_master_version")
    facts = {"min_master_version": expression, "release channel": (cluster.get("release_channel") or {}).get("channel")}
    prefix = None
    for kind, name in _DATA_REF.findall(str(expression or "")):
        source = stack.get("data", {}).get(kind, {}).get(name, {})
        facts |= {f"data.{kind}.{name} {path}": value for path, value in flatten(source).items()}
        if kind == "google_container_engine_versions":
            prefix = source.get("version_prefix")
    if expression is None:
        return "the release channel's default", facts
    if "${" not in str(expression):
        return str(expression), facts
    return (str(prefix).rstrip(".") if prefix else "the newest available"), facts


def _through(old: dict[str, Any], new: dict[str, Any]) -> str:
    """ "through data.google_container_engine_versions.versions version_prefix; release channel REGULAR -> RAPID"."""
    moved = [k for k in dict.fromkeys([*old, *new]) if old.get(k) != new.get(k)]
    sources: dict[str, list[str]] = {}
    for k in moved:
        if k.startswith("data."):
            source, _, attribute = k.partition(" ")
            sources.setdefault(source, []).append(attribute)
    parts = [f"through {source} {', '.join(attributes)}" for source, attributes in sources.items()]
    if "min_master_version" in moved:
        parts.append("min_master_version changes")
    if "release channel" in moved:
        parts.append(f"release channel {old.get('release channel')} -> {new.get('release channel')}")
    return "; ".join(parts)


def _node_facts(pool: dict[str, Any]) -> dict[str, Any]:
    """What decides a pool's node version and how it is upgraded."""
    accelerators = (pool.get("node_config") or {}).get("guest_accelerator") or []
    drivers = [(a.get("gpu_driver_installation_config") or {}).get("gpu_driver_version") for a in accelerators]
    return {
        "version": pool.get("version"),
        "auto_upgrade": (pool.get("management") or {}).get("auto_upgrade"),
        **flatten(pool.get("upgrade_settings"), "upgrade_settings"),
        "gpu_driver_version": ", ".join(str(d) for d in drivers if d) or None,
    }


def _is_gpu(pool: dict[str, Any]) -> bool:
    return bool((pool.get("node_config") or {}).get("guest_accelerator"))


def _following_gpu_pools(stack: dict[str, Any], cluster_address: str) -> bool:
    """GPU pools of the cluster that GKE upgrades to the control plane's version: no version of their own."""
    return any(
        _is_gpu(p)
        and p.get("version") is None
        and (p.get("management") or {}).get("auto_upgrade") is not False
        and f"google_container_cluster.{cluster_address}." in str(p.get("cluster"))
        for p in _of_kind(stack, "google_container_node_pool").values()
    )


def _fact(key: str, value: Any) -> str:
    if key == "version" and value is None:
        return "version of the control plane"
    return f"{key} {_text(value)}"


def _text(value: Any) -> str:
    if value is None:
        return "unset"
    return value if isinstance(value, str) else json.dumps(value)


def _time(moment: str) -> datetime:
    parsed = datetime.fromisoformat(moment)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


# Argo CD sources and images


def _chart_changes(before: Clusters, after: Clusters) -> Iterator[tuple[str, VersionChange]]:
    """Argo CD Applications' sources: a chart by name, a Git source by its Application."""
    for cluster in (c for c in after if c in before):
        old, new = _sources(before[cluster]), _sources(after[cluster])
        for what in [*new, *(w for w in old if w not in new)]:
            if old.get(what) == new.get(what):
                continue
            old_repos, new_repos = {r for r, _ in old.get(what, set())}, {r for r, _ in new.get(what, set())}
            note = ""
            if old_repos and new_repos and old_repos != new_repos:
                note = f"repository {', '.join(sorted(old_repos))} -> {', '.join(sorted(new_repos))}"
            # A chart brings operators, CRDs and webhooks cluster-wide; a revert does not undo its CRDs.
            yield cluster, VersionChange(what, (), _revisions(old.get(what)), _revisions(new.get(what)), note, True)


def _sources(objects: list[Obj]) -> dict[str, set[tuple[str, str]]]:
    out: dict[str, set[tuple[str, str]]] = {}
    for o in objects:
        if o.get("kind") != "Application" or not str(o.get("apiVersion", "")).startswith("argoproj.io/"):
            continue
        spec, app = o.get("spec", {}), o.get("metadata", {}).get("name")
        sources = spec.get("sources") or ([spec["source"]] if spec.get("source") else [])
        for source in sources:
            what = f"chart {source['chart']}" if source.get("chart") else f"application {app}"
            if not source.get("chart") and len(sources) > 1:
                what += f" {source.get('path', source.get('repoURL'))}"
            # Argo CD's default revision is the repository's HEAD.
            out.setdefault(what, set()).add((str(source.get("repoURL")), str(source.get("targetRevision") or "HEAD")))
    return out


def _revisions(pins: set[tuple[str, str]] | None) -> str | None:
    return ", ".join(sorted({revision for _, revision in pins})) if pins else None


def _image_changes(
    before: Mapping[str, Iterable[Any]], after: Mapping[str, Iterable[Any]]
) -> Iterator[tuple[str, VersionChange]]:
    """Image pins by repository, per cluster (or stack)."""
    for where in (w for w in after if w in before):
        old, new = image_pins(before[where]), image_pins(after[where])
        for repository in [*new, *(r for r in old if r not in new)]:
            if old.get(repository) == new.get(repository):
                continue
            old_pins, new_pins = old.get(repository, set()), new.get(repository, set())
            weakened = _weakened(old_pins, new_pins)
            new_digest = digest_moved(old_pins, new_pins)
            note = repository + (
                f"; the pin is weakened: {weakened}"
                if weakened
                else "; a new digest: new content"
                if new_digest
                else ""
            )
            change = VersionChange(
                f"image {repository.rsplit('/', 1)[-1]}",
                (),
                ", ".join(sorted(old_pins)) or None,
                ", ".join(sorted(new_pins)) or None,
                note,
                bool(weakened or new_digest),  # either way other bytes run: an owner approves
                repository,
            )
            yield where, change


def _digests(pins: Iterable[str]) -> set[str]:
    return {p.partition("@")[2] for p in pins if "@" in p}


def digest_moved(old: set[str], new: set[str]) -> bool:
    """Whether the new pins name a digest the old ones did not: other bytes run, whatever the tag says."""
    return bool(_digests(new)) and _digests(new) != _digests(old)


def join_image(repository: str, pin: str) -> str:
    """split_image's inverse: (`registry/repo`, `1.0@sha256:ab`) -> `registry/repo:1.0@sha256:ab`."""
    if pin == _UNPINNED:
        return repository
    return f"{repository}{pin}" if pin.startswith("@") else f"{repository}:{pin}"


def _weakened(old: set[str], new: set[str]) -> str:
    """Why the new pins let what runs change without a review: a digest dropped, or no tag at all."""
    if any("@" in p for p in old) and any("@" not in p for p in new):
        return "digest removed"
    if any(p in (_UNPINNED, "latest") for p in new) and not any(p in (_UNPINNED, "latest") for p in old):
        return "no version"
    return ""


def image_pins(objects: Iterable[Any]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for o in objects:
        for reference in _images(o):
            repository, pin = split_image(reference)
            out.setdefault(repository, set()).add(pin)
    return out


def _images(value: Any) -> Iterator[str]:
    """Every `image:` in an object: containers and init containers of any pod template (custom
    resources' too), Terraform attributes, and Helm values' {registry, repository, tag}."""
    if isinstance(value, list):
        for item in value:
            yield from _images(item)
    if not isinstance(value, dict):
        return
    for key, item in value.items():
        if key == "image" and isinstance(item, str) and item:
            yield item
        elif key == "image" and isinstance(item, dict) and item.get("repository"):
            name = "/".join(str(item[k]) for k in ("registry", "repository") if item.get(k))
            yield f"{name}:{item['tag']}" if item.get("tag") else name
        else:
            yield from _images(item)


def split_image(reference: str) -> tuple[str, str]:
    """`registry/repo:1.0@sha256:ab` -> (`registry/repo`, `1.0@sha256:ab`); a registry's port is no tag."""
    name, at, digest = reference.partition("@")
    slash, colon = name.rfind("/"), name.rfind(":")
    repository, tag = (name[:colon], name[colon + 1 :]) if colon > slash else (name, "")
    return repository, (tag + (f"@{digest}" if at else "")) or _UNPINNED


def _bodies(stack: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for items in stack.get("resource", {}).values():
        yield from items.values()


def _grouped(found: list[tuple[str, VersionChange]]) -> list[VersionChange]:
    """One entry per identical change, listing every cluster it happens in (first-seen order)."""
    where: dict[VersionChange, list[str]] = {}
    for place, change in found:
        places = where.setdefault(change, [])
        if place not in places:
            places.append(place)
    return [replace(c, where=tuple(places)) for c, places in where.items()]
