"""What a change does to each Terraform stack: from synthesized JSON (an estimate) or a real plan.

Resources are compared by `type.name`. A changed attribute that forces replacement, or a
removed cluster, node pool, subnetwork or network, is destructive; the report says what it
takes down. What forces replacement: the pinned provider's ForceNew attributes
(`provider_forcenew.json`, read from its Go source by scripts/provider_forcenew.py), the ones
its CustomizeDiff forces on some changes (taken as always, except where `_grows_in_place`
knows better), and `replacement.yaml`: in-place updates that recreate every node of a pool.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from importlib import resources as package_files
from ipaddress import IPv4Network
from typing import Any, NamedTuple

import yaml

from contract import names
from contract.words import possessive
from fleet.catalog import MACHINE_TYPES
from meridian_infra.report import pool_capacity

Stacks = dict[str, dict[str, Any]]
NODE_POOL = "google_container_node_pool"
GUARDED = (
    "google_container_cluster",
    "google_container_node_pool",
    "google_compute_subnetwork",
    "google_compute_network",
    "google_storage_bucket",
    "google_storage_managed_folder",
)
# Resources that hold data (checkpoints, datasets): deleting or replacing one is destructive for what is in it.
DATA = ("google_storage_bucket", "google_storage_managed_folder")
_REFERENCE = re.compile(r"^\$\{(\w+)\.([\w-]+)\.name\}$")


def _package_text(name: str) -> str:
    return package_files.files("review").joinpath(name).read_text(encoding="utf-8")


@cache
def provider_forcenew() -> dict[str, Any]:
    """The provider schema's replacement data (see scripts/provider_forcenew.py for its keys)."""
    data: dict[str, Any] = json.loads(_package_text("provider_forcenew.json"))
    return data


def recreating_attributes() -> dict[str, dict[str, dict[str, str]]]:
    """type -> attribute -> {why, source}: in-place updates that recreate or move every node of a pool."""
    data: dict[str, dict[str, dict[str, str]]] = yaml.safe_load(_package_text("replacement.yaml"))
    return data


def replacement_attributes() -> dict[str, list[str]]:
    """type -> attributes whose change replaces the resource, or every node of a pool."""
    schema = provider_forcenew()
    recreating = recreating_attributes()
    kinds = [*schema["force_new"], *(k for k in recreating if k not in schema["force_new"])]
    return {
        kind: sorted(
            {
                *schema["force_new"].get(kind, []),
                *(c["path"] for c in schema["force_new_if"].get(kind, [])),
                *recreating.get(kind, {}),
            }
        )
        for kind in kinds
    }


@dataclass(frozen=True)
class Change:
    path: str
    before: Any
    after: Any


@dataclass
class ResourceDiff:
    address: str  # type.name
    action: str  # create, delete, update, replace
    changes: list[Change] = field(default_factory=list)
    destructive: str = ""  # what it takes down, when it does


@dataclass
class StackDiff:
    stack: str
    resources: list[ResourceDiff] = field(default_factory=list)
    source: str = "estimate"  # or "plan"

    @property
    def destructive(self) -> list[ResourceDiff]:
        return [r for r in self.resources if r.destructive]


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Leaf values by dotted path; list items by index. The `//` metadata cdktn adds is left out."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key == "//":
                continue
            out |= flatten(item, f"{prefix}.{key}" if prefix else str(key))
        return out or ({prefix: {}} if prefix else {})
    if isinstance(value, list):
        out = {}
        for index, item in enumerate(value):
            out |= flatten(item, f"{prefix}.{index}")
        return out or {prefix: []}
    return {prefix: value}


def attribute_changes(before: dict[str, Any], after: dict[str, Any]) -> list[Change]:
    old, new = flatten(before), flatten(after)
    return [Change(p, old.get(p), new.get(p)) for p in sorted(set(old) | set(new)) if old.get(p) != new.get(p)]


def _matches(path: str, attribute: str) -> bool:
    """Whether a changed path (`node_config.guest_accelerator.0.count`) falls under a listed attribute."""
    parts = [p for p in path.split(".") if not (p.isascii() and p.isdigit())]
    wanted = attribute.split(".")
    return parts[: len(wanted)] == wanted


def _grows_in_place(kind: str, change: Change) -> bool:
    """A subnetwork's primary range may grow in place (same start, shorter prefix); nothing else may change."""
    if kind != "google_compute_subnetwork" or change.path != "ip_cidr_range":
        return False
    try:
        old, new = IPv4Network(str(change.before)), IPv4Network(str(change.after))
    except ValueError:
        return False
    return old.subnet_of(new) and old.network_address == new.network_address


def forcing(kind: str, changes: list[Change], table: dict[str, list[str]]) -> list[Change]:
    listed = table.get(kind, [])
    return [c for c in changes if any(_matches(c.path, a) for a in listed) and not _grows_in_place(kind, c)]


def _resources(stack: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    return {
        f"{kind}.{name}": (kind, body)
        for kind, items in stack.get("resource", {}).items()
        for name, body in items.items()
    }


def short_gpu(gpu_type: str) -> str:
    """ "nvidia-h200-141gb" -> "H200" (the machine catalog's model name)."""
    models = {m.gpu_type: m.gpu_model for m in MACHINE_TYPES.values() if m.gpu_type}
    return models.get(gpu_type, gpu_type or "GPU")


def _resolved(value: Any, all_resources: dict[str, tuple[str, dict[str, Any]]]) -> str:
    """A `${type.name.name}` reference (synthesized JSON) as the referenced resource's name, when it has one."""
    match = _REFERENCE.match(str(value))
    if match and f"{match[1]}.{match[2]}" in all_resources:
        return str(all_resources[f"{match[1]}.{match[2]}"][1].get("name", value))
    return str(value)


def describe_data_loss(
    kind: str, body: dict[str, Any], verb: str, resources: dict[str, tuple[str, dict[str, Any]]]
) -> str:
    """ "deletes managed folder teams/evals/ of bucket meridian-ckpt-us-east4: ..." and what data that is.

    Cloud Storage refuses to delete a managed folder or bucket that holds objects unless forced
    (JSON API managedFolders.delete `allowNonEmpty`; the provider's `force_destroy`), and a forced
    managed folder leaves its objects behind without the folder's IAM, so the team loses them either way.
    """
    name = str(body.get("name", "?"))
    forced = "; force_destroy is set, so it goes through" if body.get("force_destroy") else ""
    if kind == "google_storage_managed_folder":
        bucket = _resolved(body.get("bucket", "?"), resources)
        data = f"gs://{bucket}/{name}"
        team = name.strip("/").rsplit("/", 1)[-1]
        held = f"team {possessive(team)} checkpoints" if name.startswith(names.TEAMS_PREFIX) else "its objects"
        return (
            f"{verb} managed folder {name} of bucket {bucket}, which holds {held} ({data}): the apply fails while it "
            f"holds objects{forced}; copy or delete them first, and its access grants go with it"
        )
    return f"{verb} bucket {name} and every object in it (gs://{name}/): the apply fails while it holds objects{forced}"


def describe_loss(
    stack: str, kind: str, body: dict[str, Any], verb: str, all_resources: dict[str, tuple[str, dict[str, Any]]]
) -> str:
    """ "replaces node pool h200-a in us-central1-b: 128 nodes, 1,024 H200"."""
    if kind in DATA:
        return describe_data_loss(kind, body, verb, all_resources)
    name = body.get("name", "?")
    if kind == "google_container_node_pool":
        nodes, gpus, gpu_type = pool_capacity(body)
        where = ", ".join(body.get("node_locations") or [stack])
        gpu_text = f", {gpus:,} {short_gpu(gpu_type)}" if gpus else ""
        return f"{verb} node pool {name} in {where}: {nodes:,} nodes{gpu_text}"
    pools = [b for k, b in all_resources.values() if k == "google_container_node_pool"]
    nodes = sum(pool_capacity(b)[0] for b in pools)
    gpus = sum(pool_capacity(b)[1] for b in pools)
    label = {
        "google_container_cluster": "cluster",
        "google_compute_subnetwork": "subnetwork",
        "google_compute_network": "network",
    }[kind]
    scope = "" if kind == "google_container_cluster" else f", and with it the cluster in {stack}"
    return f"{verb} {label} {name}{scope}: {nodes:,} nodes, {gpus:,} GPUs"


def nested_block(value: Any) -> dict[str, Any]:
    """A nested block: an object in synthesized JSON, a one-item list in a plan."""
    if isinstance(value, list):
        value = value[0] if value else {}
    return value if isinstance(value, dict) else {}


# Scopes by what they hold back: a narrower scope lets node upgrades through.
_HOLDS_NODES = {"NO_UPGRADES": 2, "NO_MINOR_OR_NODE_UPGRADES": 1, "NO_MINOR_UPGRADES": 0}


class Exclusion(NamedTuple):
    start: str | None
    end: str | None  # None: until the end of support of the cluster's minor
    holds: int  # 2: every upgrade, 1: minor and node upgrades, 0: minor upgrades only


def exclusions(cluster: dict[str, Any]) -> dict[str, Exclusion]:
    """A cluster's maintenance exclusions by name (synthesized JSON or plan state)."""
    policy = nested_block(cluster.get("maintenance_policy"))
    out = {}
    for e in policy.get("maintenance_exclusion") or []:
        options = nested_block(e.get("exclusion_options"))
        end = None if options.get("end_time_behavior") == "UNTIL_END_OF_SUPPORT" else e.get("end_time")
        out[str(e.get("exclusion_name"))] = Exclusion(
            e.get("start_time"), end, _HOLDS_NODES.get(str(options.get("scope")), 2)
        )
    return out


def exclusion_risks(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Maintenance exclusions of a cluster that a change removes, shortens or narrows.

    They hold node upgrades off training capacity (the pools auto-upgrade, as a release
    channel requires): without them GKE may upgrade, and so recreate, GPU nodes mid-run.
    """
    old, new = exclusions(before), exclusions(after)
    name = before.get("name", "?")
    risks = []
    for exclusion, (_, end, holds) in old.items():
        if exclusion not in new:
            what = "removes"
        else:
            _, new_end, new_holds = new[exclusion]
            shorter = new_end is not None and (end is None or str(new_end) < str(end))
            if not shorter and new_holds >= holds:
                continue
            what = "shortens" if shorter else "narrows the scope of"
        risks.append(
            f"{what} maintenance exclusion {exclusion} of cluster {name}: "
            "node upgrades may then reach training capacity"
        )
    return risks


def diff_stacks(before: Stacks, after: Stacks, table: dict[str, list[str]] | None = None) -> list[StackDiff]:
    """Estimate from synthesized JSON, stack by stack (stacks in either side, HEAD's order first)."""
    table = table if table is not None else replacement_attributes()
    out = []
    for stack in [*after, *(s for s in before if s not in after)]:
        old, new = _resources(before.get(stack, {})), _resources(after.get(stack, {}))
        diff = StackDiff(stack)
        for address in [*new, *(a for a in old if a not in new)]:
            if address not in old:
                diff.resources.append(ResourceDiff(address, "create"))
                continue
            kind, body = old[address]
            if address not in new:
                loss = describe_loss(stack, kind, body, "deletes", old) if kind in GUARDED else ""
                diff.resources.append(ResourceDiff(address, "delete", destructive=loss))
                continue
            changes = attribute_changes(body, new[address][1])
            if not changes:
                continue
            forced = forcing(kind, changes, table)
            action = "replace" if forced else "update"
            loss = describe_loss(stack, kind, body, "replaces", old) if forced and kind in GUARDED else ""
            if not loss and kind == "google_container_cluster":
                loss = "; ".join(exclusion_risks(body, new[address][1]))
            diff.resources.append(ResourceDiff(address, action, changes, loss))
        if diff.resources:
            out.append(diff)
    return out


def _plan_action(actions: list[str]) -> str | None:
    if set(actions) == {"delete", "create"}:
        return "replace"
    if actions in (["create"], ["delete"], ["update"]):
        return actions[0]
    return None  # no-op, read


def diff_plan(stack: str, plan: dict[str, Any]) -> StackDiff:
    """From `terraform show -json` output: its resource_changes decide the action."""
    diff = StackDiff(stack, source="plan")
    before_state = {
        rc["address"]: (rc["type"], rc["change"].get("before") or {}) for rc in plan.get("resource_changes", [])
    }
    for rc in plan.get("resource_changes", []):
        change = rc["change"]
        action = _plan_action(change.get("actions", []))
        if action is None:
            continue
        before, after = change.get("before") or {}, change.get("after") or {}
        changes = attribute_changes(before, after) if action in ("update", "replace") else []
        loss = ""
        if rc["type"] in GUARDED and action in ("delete", "replace"):
            loss = describe_loss(
                stack, rc["type"], before, "deletes" if action == "delete" else "replaces", before_state
            )
        elif rc["type"] == "google_container_cluster" and action == "update":
            loss = "; ".join(exclusion_risks(before, after))
        diff.resources.append(ResourceDiff(rc["address"], action, changes, loss))
    return diff


def changed_paths(diffs: list[StackDiff]) -> Iterator[tuple[str, ResourceDiff]]:
    for diff in diffs:
        for resource in diff.resources:
            yield diff.stack, resource
