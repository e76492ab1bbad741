"""`gkr health`: the fleet's node health per cluster and pool, computed from what the clusters answer (pure).

Everything here reads objects anyone with Node patch or Event create rights could have written, so
nothing is trusted: a deep-check annotation that contract.health refuses is "never checked" (with the
reason), never a pass; Warden's Events are read through their typed record (contract.health.NodeEvent),
and an Event without one counts as nothing; condition texts are matched against the shape Warden's
agent writes, and anything else counts as kind `other`.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from contract import health, names
from contract.problem import Invalid

SCHEMA = "meridian.health/v1"  # the --json document; fields are only ever added
WINDOW_S = 7 * 86400.0  # failures count this long
FUTURE_SLACK_S = 3600.0  # a deep check dated later than this ahead of now was not written by Warden's clock
# Warden's phases (warden.state.PHASES), in the order a node goes through them; without the label: unmanaged.
PHASES = ("healthy", "suspect", "quarantined", "draining", "remediating", "probation", "held")
STATES = (*PHASES, "unmanaged", "other")
SIGNAL_KINDS = {  # contract.signals kinds as the report names them
    "preflight": "preflight",
    "gpu_missing": "gpu-missing",
    "nccl_errors": "nccl",
    "maintenance": "maintenance",
    "not_ready": "not-ready",
    "probation failed": "probation",
}
_STAMP = re.compile(r"(\d{1,6})@(\d{1,12})")  # the agent's condition message: "79@1733011200 13@..."
NO_POOL = "(no pool)"


@dataclass(frozen=True)
class Node:
    name: str
    pool: str
    state: str  # one of STATES
    cordoned: bool
    ready: bool
    check: health.DeepCheck | None  # the last deep check, None when never (or unreadable)
    never_why: str  # why `check` is None: "no annotation" or the decoder's line
    due: bool
    failures: dict[str, float] = field(default_factory=dict)  # kind -> latest time within the window


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any) -> float | None:
    """An RFC 3339 timestamp as the API server writes them (second or microsecond precision), else None."""
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.timestamp() if parsed.tzinfo is not None else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def state_of(labels: dict[str, Any]) -> str:
    phase = labels.get(names.WARDEN_PHASE_LABEL)
    if phase is None:
        return "unmanaged"
    return phase if phase in PHASES else "other"


def pool_of(labels: dict[str, Any]) -> str:
    pool = labels.get(names.POOL_LABEL) or labels.get(names.NODE_POOL_LABEL)
    return pool if isinstance(pool, str) and pool else NO_POOL


def last_check(annotations: dict[str, Any], node: str, now: float) -> tuple[health.DeepCheck | None, str]:
    """The node's last deep check, or None and why: missing, refused by the strict decoder, or dated in the future."""
    text = annotations.get(names.DEEP_CHECK_ANNOTATION)
    if text is None:
        return None, "no annotation"
    if not isinstance(text, str):
        return None, f"{node}: {names.DEEP_CHECK_ANNOTATION} is not text"
    try:
        check = health.loads(text, f"{node}: {names.DEEP_CHECK_ANNOTATION}")
    except Invalid as exc:
        return None, exc.lines[0][:300]
    except (ValueError, RecursionError, TypeError):  # the decoder refuses by Invalid; anything else is refused too
        return None, f"{node}: {names.DEEP_CHECK_ANNOTATION} is not a deep check record"
    if not isinstance(check.time, int | float) or not math.isfinite(check.time) or check.time > now + FUTURE_SLACK_S:
        return None, f"{node}: {names.DEEP_CHECK_ANNOTATION} time {check.time!r} is not a past time"
    return check, ""


def fault_kinds(faults: tuple[health.Fault, ...]) -> list[str]:
    """Faults as the report names them ("xid:79", "nccl"); `other` for kinds it does not know."""
    return [
        f"{f.kind}:{f.code}" if f.kind in ("xid", "sxid") and f.code is not None else SIGNAL_KINDS.get(f.kind, "other")
        for f in faults
    ]


def event_kinds(event: dict[str, Any]) -> list[str]:
    """The failures one of Warden's Events reports, from its typed record (contract.health.NodeEvent), counted
    once each: a node leaving healthy for a fault, restarting pods for an Xid, or failing probation. Warden's
    other Events (the next phase of the same fault, a burn-in, a return to service) report nothing new, and
    an Event without a readable record counts as nothing: its message is for people."""
    text = _dict(_dict(event.get("metadata")).get("annotations")).get(names.NODE_EVENT_ANNOTATION)
    if not isinstance(text, str):
        return []
    try:
        told = health.load_event(text, "event")
    except Invalid:
        return []
    return [] if told.change == "other" else fault_kinds(told.faults)


def event_time(event: dict[str, Any]) -> float | None:
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        found = parse_time(event.get(key))
        if found is not None:
            return found
    return None


def warden_events(events: list[dict[str, Any]]) -> dict[str, list[tuple[str, float]]]:
    """Node name -> (kind, time) of the failures Warden's Events report (Events from anyone else are skipped)."""
    out: dict[str, list[tuple[str, float]]] = {}
    for event in events:
        involved = _dict(event.get("involvedObject"))
        name = involved.get("name")
        if event.get("reportingComponent") != names.WARDEN_COMPONENT or involved.get("kind") != "Node":
            continue
        at = event_time(event)
        if not isinstance(name, str) or at is None:
            continue
        out.setdefault(name, []).extend((kind, at) for kind in event_kinds(event))
    return out


def condition_failures(node: dict[str, Any]) -> list[tuple[str, float]]:
    """Xids and SXids the node agent logged this boot (its conditions' "code@time" list)."""
    out = []
    kinds = {names.XID_CONDITION: "xid", names.SXID_CONDITION: "sxid"}
    for condition in _list(_dict(node.get("status")).get("conditions"))[:64]:
        condition = _dict(condition)
        kind, message = kinds.get(condition.get("type", "")), condition.get("message")
        if kind is None or condition.get("status") != "True" or not isinstance(message, str):
            continue
        for token in message[:4096].split()[:64]:
            stamp = _STAMP.fullmatch(token)
            if stamp:
                out.append((f"{kind}:{int(stamp[1])}", float(stamp[2])))
    return out


def check_failures(check: health.DeepCheck | None) -> list[tuple[str, float]]:
    if check is None or check.verdict != "fail":
        return []
    checks = [f.check if names.is_check_name(f.check) else "other" for f in check.failures[:32]]
    return [(f"deep-check:{c}", check.time) for c in checks or ["unknown"]]


def node_of(
    obj: dict[str, Any], events: list[tuple[str, float]], now: float, due_after_s: float, window_s: float = WINDOW_S
) -> Node | None:
    """One Node's line of the report; None for an object that is not a named Node."""
    meta = _dict(obj.get("metadata"))
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None
    labels, annotations = _dict(meta.get("labels")), _dict(meta.get("annotations"))
    check, why = last_check(annotations, name, now)
    conditions = [_dict(c) for c in _list(_dict(obj.get("status")).get("conditions"))[:64]]
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    failures: dict[str, float] = {}
    for kind, at in [*events, *condition_failures(obj), *check_failures(check)]:
        if now - window_s <= at <= now + FUTURE_SLACK_S:
            failures[kind] = max(at, failures.get(kind, at))
    return Node(
        name=name,
        pool=pool_of(labels),
        state=state_of(labels),
        cordoned=_dict(obj.get("spec")).get("unschedulable") is True,
        ready=ready,
        check=check,
        never_why=why,
        due=check is None or now - check.time >= due_after_s,
        failures=failures,
    )


def nodes_of(objects: list[dict[str, Any]], events: list[dict[str, Any]], now: float, due_after_s: float) -> list[Node]:
    by_node = warden_events(events)
    found = (
        node_of(obj, by_node.get(_dict(obj.get("metadata")).get("name") or "", []), now, due_after_s) for obj in objects
    )
    return sorted((n for n in found if n is not None), key=lambda n: (n.pool, n.name))


def pool_rows(nodes: list[Node]) -> list[dict[str, Any]]:
    """Per pool: nodes by state, cordoned, not ready, due, never checked, and nodes with each failure kind."""
    rows: dict[str, dict[str, Any]] = {}
    for node in nodes:
        row = rows.setdefault(
            node.pool,
            {"pool": node.pool, "nodes": 0, "states": Counter(), "cordoned": 0, "not_ready": 0, "due": 0,
             "never_checked": 0, "failures": Counter()},
        )  # fmt: skip
        row["nodes"] += 1
        row["states"][node.state] += 1
        row["cordoned"] += node.cordoned
        row["not_ready"] += not node.ready
        row["due"] += node.due
        row["never_checked"] += node.check is None
        row["failures"].update(node.failures.keys())
    for row in rows.values():
        row["states"] = {s: row["states"][s] for s in STATES if row["states"][s]}
        row["failures"] = dict(sorted(row["failures"].items()))
    return [rows[p] for p in sorted(rows)]


def node_dict(node: Node) -> dict[str, Any]:
    check = node.check
    last: dict[str, Any] = (
        {"never": True, "why": node.never_why}
        if check is None
        else {
            "time": iso(check.time),
            "kind": check.kind,
            "verdict": check.verdict,
            "level": check.level,
            "failures": [{"check": f.check, "gpu": f.gpu, "evidence": f.evidence} for f in check.failures],
        }
    )
    return {
        "name": node.name,
        "pool": node.pool,
        "state": node.state,
        "cordoned": node.cordoned,
        "ready": node.ready,
        "last_deep_check": last,
        "due": node.due,
        "failures": {kind: iso(at) for kind, at in sorted(node.failures.items())},
    }


def cluster_report(
    where: dict[str, str], nodes: list[Node], cadence: dict[str, Any], notes: list[str]
) -> dict[str, Any]:
    return {
        **where,
        "reachable": True,
        "cadence": cadence,
        "notes": notes,
        "pools": pool_rows(nodes),
        "nodes": [node_dict(n) for n in nodes],
    }


def unreachable_report(where: dict[str, str], why: str) -> dict[str, Any]:
    return {**where, "reachable": False, "error": why}


def report(clusters: list[dict[str, Any]], now: float, window_s: float = WINDOW_S) -> dict[str, Any]:
    return {"schema": SCHEMA, "generated": iso(now), "window_days": window_s / 86400, "clusters": clusters}


def _count(mapping: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in mapping.items()) or "-"


def pool_cells(cluster: dict[str, Any], row: dict[str, Any]) -> list[str]:
    return [
        cluster["region"],
        row["pool"],
        str(row["nodes"]),
        _count(row["states"]),
        str(row["cordoned"]),
        str(row["not_ready"]),
        f"{row['due']} ({row['never_checked']} never)",
        _count(row["failures"]),
    ]


POOL_HEADER = ["region", "pool", "nodes", "states", "cordoned", "not ready", "due", "failures 7d (nodes)"]


def node_line(node: dict[str, Any]) -> str:
    """One node with --nodes: state, flags, last deep check, due, failures."""
    last = node["last_deep_check"]
    checked = (
        f"never ({last['why']})"
        if last.get("never")
        else f"{last['verdict']} {last['kind']} level {last['level']} at {last['time']}"
    )
    flags = [f for f, on in (("cordoned", node["cordoned"]), ("NotReady", not node["ready"])) if on]
    failures = ", ".join(f"{k}@{v}" for k, v in node["failures"].items()) or "none"
    return (
        f"  {node['pool']}/{node['name']}: {node['state']}{''.join(' ' + f for f in flags)}; "
        f"deep check: {checked}{'; due' if node['due'] else ''}; failures 7d: {failures}"
    )
