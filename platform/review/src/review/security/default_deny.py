"""Terraform, per stack, by default: every change the review does not know to be harmless.

firewall_widening and iam_widening (stacks.py) read what firewall rules and IAM let through, capacity.py
and versions.py read GPUs and versions. Anything else a stack says (a node pool's metadata server, the
control plane's authorized networks, legacy ABAC, deletion protection, Binary Authorization, a bucket's
lifecycle, a key exported as an output) used to be an attribute diff in the Terraform section, exit 0.
Here every element of a stack (resources, data sources, outputs, the provider and terraform blocks) is
compared attribute by attribute, and each change is a finding, "<address> <path>: <before> -> <after>",
unless KNOWN_HARMLESS says why it is not; a new or removed element is one line with its attributes.
Lists of plain values compare as sets, and lists of blocks of another length by the blocks each side
lacks, so an inserted item is one line, not a shift of every index after it.
Pure: two stacks in, lines out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from review.access import FIREWALL
from review.kubernetes import text
from review.security.common import same
from review.security.stacks import _CUSTOM_ROLE, _IAM
from review.terraform import GUARDED, _matches, flatten

CREATED, CHANGED, REMOVED = "created", "changed", "removed"
_ALL = (CREATED, CHANGED, REMOVED)


@dataclass(frozen=True)
class Known:
    """Changes known to be harmless, and why: attributes of an element on both sides (`paths`), or, with no
    paths, a whole element `on` creation, change or removal (and only a body `when` accepts, if given)."""

    kinds: str  # regular expression over the element's kind: a resource type, data.<type>, output, provider
    paths: tuple[str, ...]  # attribute paths, list indexes left out; a change under one is harmless
    why: str
    on: tuple[str, ...] = ()
    when: Callable[[Any], bool] | None = None
    fewer: bool = False  # only items leaving a list, none joining it


# An output naming a resource ("${google_service_account.sa_nodes.email}"): an identifier, nothing secret.
_IDENTIFIER = re.compile(r"\$\{[\w-]+\.[\w-]+\.(name|id|email|self_link)\}")


def _names_a_resource(body: Any) -> bool:
    return (
        isinstance(body, dict)
        and set(body) <= {"value", "description", "//"}
        and bool(_IDENTIFIER.fullmatch(str(body.get("value"))))
    )


_POOL, _CLUSTER = "google_container_node_pool", "google_container_cluster"
_CAPACITY = (
    "capacity.py shows each pool's nodes, machine and GPU type, and zones: growth is listed there; a loss, a move or "
    "another machine is destructive"
)
_VERSIONS = "versions.py lists it for an owner's approval (label upgrade)"
_FIREWALL = "firewall_widening reads what the rule lets through: more is its finding, less widens nothing"
_GRANT_FIELDS = (  # what review.access.grant reads of a rule
    "name",
    "direction",
    "allow",
    "deny",
    "source_ranges",
    "destination_ranges",
    "target_service_accounts",
    "target_tags",
    "disabled",
)

KNOWN_HARMLESS: tuple[Known, ...] = (
    Known(
        _POOL,
        (
            "node_count",
            "autoscaling",
            "node_locations",
            "node_config.machine_type",
            "node_config.guest_accelerator.type",
            "node_config.guest_accelerator.count",
        ),
        _CAPACITY,
    ),
    Known(
        _POOL,
        ("node_config.ephemeral_storage_local_ssd_config",),
        "a node's scratch disks (an A3 machine type fixes how many): what it stores, not who may reach it",
    ),
    Known(
        _POOL,
        ("network_config.additional_node_network_configs",),
        "a node that leaves a network reaches less and is reached by less",
        fewer=True,
    ),
    Known(
        _POOL,
        (
            "version",
            "management.auto_upgrade",
            "upgrade_settings",
            "node_config.guest_accelerator.gpu_driver_installation_config",
        ),
        _VERSIONS,
    ),
    Known(_CLUSTER, ("min_master_version", "node_version", "release_channel"), _VERSIONS),
    Known("data.google_container_engine_versions", (), "versions.py follows min_master_version through it", _ALL),
    Known(
        _CLUSTER,
        ("maintenance_policy",),
        "when GKE may upgrade nodes: an exclusion removed, shortened or narrowed is destructive (terraform.py)",
    ),
    Known(".*", ("description", "display_name", "title"), "text for people: nothing authorizes on it"),
    Known(
        ".*",
        ("labels", "resource_labels", "default_labels"),
        "Google Cloud labels: IAM conditions and organization policies read tags, never labels (Resource "
        "Manager, tags overview), and nothing here selects on them (Warden's GCE calls name instances); "
        "Kubernetes node labels are node_config.labels, not these",
    ),
    Known(FIREWALL, _GRANT_FIELDS, _FIREWALL),
    Known(FIREWALL, (), _FIREWALL, (CREATED, REMOVED)),
    Known(
        _IAM.pattern,
        (),
        "iam_widening reads every grant it makes: one more is its finding, one fewer widens nothing",
        _ALL,
    ),
    Known("data.google_iam_policy", (), "iam_widening reads its bindings through the policy that names it", _ALL),
    Known(_CUSTOM_ROLE.pattern, ("permissions",), "iam_widening lists the permissions a role gains"),
    Known(
        _CUSTOM_ROLE.pattern,
        (),
        "iam_widening lists a new role's permissions; a role held by nobody grants nothing",
        (CREATED, REMOVED),
    ),
    Known(
        "google_service_account",
        (),
        "an identity that may do nothing yet: what it may do and who may act as it are IAM (iam_widening); "
        "a key is a google_service_account_key, listed",
        (CREATED,),
    ),
    Known(
        "google_storage_managed_folder",
        (),
        "a bucket prefix holding nothing: who may use it is IAM (iam_widening)",
        (CREATED,),
    ),
    Known(
        "output",
        (),
        "it names a resource (name, id, email, self link): nothing secret, and a stack that starts reading it is "
        "itself changed",
        (CREATED,),
        _names_a_resource,
    ),
    Known(
        "output", (), "nothing can read what is no longer exported; a stack that still does fails to plan", (REMOVED,)
    ),
    Known(
        "|".join(GUARDED), (), "deleting it is destructive: terraform.py lists it with what it takes down", (REMOVED,)
    ),
)


def elements(stack: Any) -> dict[str, tuple[str, Any]]:
    """address -> (kind, body): resources as type.name, data sources as data.type.name, outputs as
    output.name, any other block (provider, terraform) as block.name. cdktn's `//` metadata is left out."""
    out: dict[str, tuple[str, Any]] = {}
    for block, items in (stack if isinstance(stack, dict) else {}).items():
        if block == "//":
            continue
        if block in ("resource", "data") and isinstance(items, dict):
            prefix = "data." if block == "data" else ""
            for kind, named in items.items():
                for name, body in (named if isinstance(named, dict) else {"": named}).items():
                    out[f"{prefix}{kind}.{name}".rstrip(".")] = (f"{prefix}{kind}", body)
        elif isinstance(items, dict):
            out |= {f"{block}.{name}": (str(block), body) for name, body in items.items()}
        else:
            out[str(block)] = (str(block), items)
    return out


def changes(old: Any, new: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(path, before, after) of each difference: blocks key by key; lists of blocks item by item when both
    sides are as long, else (and lists of plain values always) as what each side has that the other lacks."""
    if same(old, new):
        return
    if isinstance(old, dict | None) and isinstance(new, dict | None):
        old, new = old or {}, new or {}
        for key in sorted({*old, *new}, key=str):
            if key != "//":
                yield from changes(old.get(key), new.get(key), f"{path}.{key}" if path else str(key))
    elif isinstance(old, list | None) and isinstance(new, list | None):
        old, new = old or [], new or []
        if len(old) == len(new) and any(isinstance(v, dict | list) for v in [*old, *new]):
            for index, (a, b) in enumerate(zip(old, new, strict=True)):
                yield from changes(a, b, f"{path}.{index}")
            return
        gone, added = [v for v in old if v not in new], [v for v in new if v not in old]
        if gone or added:
            yield path, gone or None, added or None
    else:
        yield path, old, new


def short(value: Any, limit: int = 80) -> str:
    """A value as a reader sees it, on one line (a startup script's newlines would break the comment's list),
    cut to `limit` characters; a list as its items."""
    shown = "(none)" if value is None else ", ".join(map(text, value)) if isinstance(value, list) else text(value)
    shown = " ".join(shown.split())
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def _summary(body: Any) -> str:
    """ "path=value, ..." of every attribute, sorted, cut so that the line fits a comment's (report.LINE)."""
    leaves = sorted((path.lstrip("."), value) for path, value in flatten(body).items())
    return short(", ".join(f"{p}={short(v)}" if p else short(v) for p, v in leaves) or "(empty)", 560)


def _whole(kind: str, on: str, body: Any) -> bool:
    return any(
        not k.paths and on in k.on and re.fullmatch(k.kinds, kind) and (k.when is None or k.when(body))
        for k in KNOWN_HARMLESS
    )


def _harmless(kind: str, path: str, before: Any, after: Any) -> bool:
    fewer = isinstance(before, list) and after is None
    return any(
        re.fullmatch(k.kinds, kind) and any(_matches(path, p) for p in k.paths) and (fewer or not k.fewer)
        for k in KNOWN_HARMLESS
    )


def unknown_changes(old_stack: Any, new_stack: Any, per_element: int = 10) -> list[str]:
    """Each change of a stack not known to be harmless, one line each (at most `per_element` per element:
    the full report's Terraform section has every attribute)."""
    old, new = elements(old_stack), elements(new_stack)
    out = []
    for address in [*new, *(a for a in old if a not in new)]:
        if address not in old:
            kind, body = new[address]
            out += [] if _whole(kind, CREATED, body) else [f"new {address}: {_summary(body)}"]
        elif address not in new:
            kind, body = old[address]
            out += [] if _whole(kind, REMOVED, body) else [f"{address} removed (was: {_summary(body)})"]
        elif not _whole(new[address][0], CHANGED, new[address][1]):
            kind = new[address][0]
            lines = [
                f"{address}{' ' + path if path else ''}: {short(before)} -> {short(after)}"
                for path, before, after in changes(old[address][1], new[address][1])
                if not _harmless(kind, path, before, after)
            ]
            more = len(lines) - per_element
            out += (
                lines[:per_element] if more <= 0 else [*lines[: per_element - 1], f"{address}: {more + 1} more changes"]
            )
    return out
