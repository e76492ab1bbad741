"""What `gkr health` reads from one cluster: its Nodes, Warden's Events about them, Warden's config.

Every list is paged (kube.list_pages); one cluster that does not answer is reported as such by the
caller and never hides the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contract import names
from contract import warden as policy
from contract.problem import Invalid
from gkr import kube

# Warden writes its Events in `default` (warden.actions.Actuator.event), with source.component warden.
EVENTS_PATH = "/api/v1/namespaces/default/events"
EVENTS_SELECTOR = f"involvedObject.kind=Node,source={names.WARDEN_KSA}"
NODES_PATH = "/api/v1/nodes"
CONFIG_PATH = f"/api/v1/namespaces/{names.WARDEN_NAMESPACE}/configmaps/{names.WARDEN_CONFIGMAP}"
DEFAULT_DUE_AFTER_S = 7 * 86400.0  # Warden's sweep cadence when neither the flag nor its config says


@dataclass
class ClusterRead:
    nodes: list[dict[str, Any]]
    events: list[dict[str, Any]]
    cadence: dict[str, Any]  # {"seconds", "source"}
    notes: list[str] = field(default_factory=list)


def sweep_every(config: policy.Config) -> float | None:
    """Warden's sweep cadence, where this contract version has one (issue 21 adds `sweep_every_s`)."""
    value = getattr(config, "sweep_every_s", None)
    return float(value) if isinstance(value, int | float) and value > 0 else None


def cadence(api: Any, timeout: float, due_after_s: float | None) -> tuple[dict[str, Any], list[str]]:
    """When a node is due: --due-after, else Warden's config in the cluster, else the default (with why)."""
    if due_after_s is not None:
        return {"seconds": due_after_s, "source": "--due-after"}, []
    where = f"ConfigMap {names.WARDEN_NAMESPACE}/{names.WARDEN_CONFIGMAP}"
    try:
        data = kube.get_json(api, CONFIG_PATH, [], timeout).get("data")
        text = data.get(policy.FILE) if isinstance(data, dict) else None
        if not isinstance(text, str):
            raise Invalid([f"{where} has no {policy.FILE}"])
        found = sweep_every(policy.loads(text, where))
        if found is None:
            raise Invalid([f"{where} sets no sweep cadence"])
        return {"seconds": found, "source": where}, []
    except Invalid as exc:
        why = exc.lines[0]
    except Exception as exc:
        why = f"reading {where}: {kube.unreachable(exc)}"
    default = sweep_every(policy.DEFAULTS) or DEFAULT_DUE_AFTER_S
    return {"seconds": default, "source": "default"}, [f"{why}; due after the default {default / 86400:g} days"]


def read(api: Any, timeout: float, due_after_s: float | None) -> ClusterRead:
    """One cluster's objects; raises on a failed node or event list (the cluster is then unreachable)."""
    nodes, more_nodes = kube.list_pages(api, NODES_PATH, [], timeout)
    events, more_events = kube.list_pages(api, EVENTS_PATH, [("fieldSelector", EVENTS_SELECTOR)], timeout)
    found, notes = cadence(api, timeout, due_after_s)
    if more_nodes:
        notes.append(f"only the first {len(nodes)} nodes were read")
    if more_events:
        notes.append(f"only the first {len(events)} of Warden's Events were read")
    return ClusterRead(nodes, events, found, notes)
