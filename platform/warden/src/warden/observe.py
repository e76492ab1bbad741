"""What Warden sees on a Node object: its pool, record, facts and signals (pure).

Signals come from the Node itself: the agent's conditions
(names.XID_CONDITION, names.SXID_CONDITION), Ready, preflight's failure
annotation (only principals that may patch Nodes write it; read with the
node-health contract's decoder), GPUs missing from allocatable and GKE's
scheduled-maintenance label. A failed deep check that Warden recorded on the
Node (names.DEEP_CHECK_ANNOTATION: a burn-in's, an idle sweep's or a
verification's) is a `preflight` signal like preflight's own. What tenants'
pods report (NCCL failure Events, failed preflight init containers) is never
a signal here: it only asks for a verification (warden.trust, warden.verify).
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from contract import health, names
from contract.problem import Invalid
from contract.signals import Kind
from warden.controller import NodeView
from warden.policy import Policy, Signal
from warden.state import MAX_TIME, Facts, HostReport, Record, read_record

# Node conditions the agent writes, and the signal kind each carries; the message lists
# "<code>@<epoch seconds>" per code.
AGENT_CONDITIONS: dict[str, Kind] = {names.XID_CONDITION: "xid", names.SXID_CONDITION: "sxid"}


def parse_codes(message: str) -> list[tuple[int, float]]:
    """(code, when) pairs from an agent condition message such as "79@1764412800 13@1764412000"."""
    pairs = []
    for item in message.split()[:64]:
        code, _, when = item.partition("@")
        # ASCII digits only ("²".isdigit() is True), and no number too long to be a code or a time.
        if code.isascii() and code.isdigit() and len(code) <= 6:
            ok = when.isascii() and when.replace(".", "", 1).isdigit() and len(when) <= 20
            at = float(when) if ok else 0.0
            pairs.append((int(code), at if math.isfinite(at) and at <= MAX_TIME else 0.0))
    return pairs


def parse_time(value: str) -> float:
    """Epoch seconds of a Kubernetes timestamp (RFC 3339); 0 when it is missing or unreadable."""
    try:
        at = datetime.fromisoformat(value[:64].replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError, OSError):
        return 0.0
    return at if 0 <= at <= MAX_TIME else 0.0


def last_deep_check(annotations: dict[str, str]) -> health.DeepCheck | None:
    """The Node's last deep check; None when it has none or it cannot be read (then it counts as never checked)."""
    raw = annotations.get(names.DEEP_CHECK_ANNOTATION)
    if not isinstance(raw, str) or not raw:
        return None
    try:
        check = health.loads(raw, names.DEEP_CHECK_ANNOTATION)
    except (Invalid, ValueError, RecursionError):
        return None
    return check if math.isfinite(check.time) and 0 <= check.time <= MAX_TIME else None


def deep_check_signal(check: health.DeepCheck | None) -> Signal | None:
    """A failed deep check, as the signal it is to the policy (at its time, so it is acted on once)."""
    if check is None or check.verdict != "fail":
        return None
    first = check.failures[0] if check.failures else None
    what = f"{first.check}{'' if first.gpu is None else f' gpu {first.gpu}'}" if first else "failed"
    return Signal("preflight", detail=f"deep check ({check.kind}): {what}", at=check.time)


def joined(node: dict[str, Any], now: float, policy: Policy) -> bool:
    """New to Warden: no record, no deep check, and a Node created within policy.burn_in_max_age_s.

    Nodes that were there before Warden (first deploy) are older: they are swept, not burned in.
    """
    meta = node.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    if annotations.get(names.WARDEN_RECORD_ANNOTATION) or annotations.get(names.DEEP_CHECK_ANNOTATION):
        return False
    created = parse_time(str(meta.get("creationTimestamp", "")))
    return created > 0 and now - created <= policy.burn_in_max_age_s


def signals(node: dict[str, Any], now: float, policy: Policy) -> tuple[Signal, ...]:
    meta, status = node.get("metadata", {}), node.get("status", {})
    found: list[Signal] = []
    for condition in status.get("conditions") or []:
        kind = AGENT_CONDITIONS.get(condition.get("type", ""))
        if kind and condition.get("status") == "True":
            found += [Signal(kind, code, at=when) for code, when in parse_codes(condition.get("message", ""))]
        if condition.get("type") == "Ready" and condition.get("status") != "True":
            found.append(Signal("not_ready", detail=condition.get("reason", "")))
    raw = (meta.get("annotations") or {}).get(names.PREFLIGHT_FAILURE_ANNOTATION)
    if raw:
        try:
            report = health.load_report(str(raw), names.PREFLIGHT_FAILURE_ANNOTATION)
            gpu = "" if report.gpu is None else f" gpu {report.gpu}"
            found.append(Signal("preflight", detail=f"{report.check}{gpu}", at=report.time))
        except (Invalid, ValueError, RecursionError):
            found.append(Signal("preflight", detail="unreadable annotation"))
    capacity = int((status.get("capacity") or {}).get(names.GPU_RESOURCE, 0))
    allocatable = int((status.get("allocatable") or {}).get(names.GPU_RESOURCE, capacity))
    if allocatable < capacity:
        found.append(Signal("gpu_missing", detail=f"{allocatable}/{capacity} GPUs allocatable"))
    maintenance = (meta.get("labels") or {}).get(names.MAINTENANCE_LABEL, "")
    if maintenance.isdigit() and float(maintenance) - now <= policy.maintenance_lead_s:
        found.append(Signal("maintenance", detail=f"host maintenance at {maintenance}"))
    if deep := deep_check_signal(last_deep_check(meta.get("annotations") or {})):
        found.append(deep)
    return tuple(found)


def queued(node: dict[str, Any]) -> bool:
    """A flex-start node with queued provisioning: GKE taints it cloud.google.com/gke-queued (REFERENCE, Kueue)."""
    return any(t.get("key") == names.QUEUED_TAINT_KEY for t in (node.get("spec") or {}).get("taints") or [])


def reportable(node: dict[str, Any]) -> bool:
    """Whether Compute Engine takes a host report for the node's VM: not spot, preemptible or flex-start.

    reportHostAsFaulty answers INSTANCES_WITHOUT_RESERVATION_NOT_SUPPORTED for VMs created without a
    reservation (https://cloud.google.com/ai-hypercomputer/docs/troubleshooting/troubleshoot-faulty-host-api).
    Read from what GKE writes on the Node, which no tenant can: its provisioning labels and the queued taint.
    A label missed here costs one refused report and a round (warden.actions.report_host); an on-demand VM,
    labelled as a reservation-bound one is (`standard`), takes that path.
    """
    labels = (node.get("metadata") or {}).get("labels") or {}
    spot = labels.get(names.SPOT_LABEL) == "true" or labels.get(names.PREEMPTIBLE_LABEL) == "true"
    flex = labels.get(names.FLEX_START_LABEL) == "true" or queued(node)
    return not (spot or flex or labels.get(names.PROVISIONING_LABEL) in ("spot", "preemptible", "flex-start"))


def view(
    node: dict[str, Any],
    record: Record,
    now: float,
    policy: Policy,
    pods: int = 0,
    probation: str | None = None,
    idle: bool = False,
    check_missing: bool = False,
    report: HostReport | None = None,
) -> NodeView:
    meta, status = node.get("metadata", {}), node.get("status", {})
    labels = meta.get("labels") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    spec = node.get("spec") or {}
    warden_taint = any(t.get("key") == names.WARDEN_TAINT_KEY for t in spec.get("taints") or [])
    facts = Facts(
        ready=ready,
        boot_id=(status.get("nodeInfo") or {}).get("bootID", ""),
        pods=pods,
        preflight=probation,
        opted_out=labels.get(names.WARDEN_OPT_OUT_LABEL) == "true",
        cordoned_by_other=bool(spec.get("unschedulable")) and not warden_taint,
        joined=policy.burn_in and joined(node, now, policy),
        idle=idle,
        check_missing=check_missing,
        reportable=reportable(node),
        report=report,
    )
    return NodeView(
        name=meta["name"],
        pool=labels.get(names.NODE_POOL_LABEL, ""),
        record=record,
        facts=facts,
        signals=signals(node, now, policy),
    )


def record_of(node: dict[str, Any]) -> Record:
    return Record.from_annotations(node.get("metadata", {}).get("annotations") or {})


def read_node_record(node: dict[str, Any]) -> tuple[Record, str | None]:
    return read_record(node.get("metadata", {}).get("annotations") or {})


def is_gpu_node(node: dict[str, Any]) -> bool:
    """Raises (ValueError, TypeError, AttributeError) on a Node that is not shaped like one: the caller holds it."""
    return int((node.get("status", {}).get("capacity") or {}).get(names.GPU_RESOURCE, 0)) > 0


def signal_key(node: dict[str, Any]) -> tuple[Any, ...]:
    """What of a Node can carry a signal: a watch event that changes it starts a round for that node soon.

    Warden's own record and cordon are left out, so its own writes do not wake it up again.
    """
    meta, status = node.get("metadata") or {}, node.get("status") or {}
    conditions = tuple(
        sorted(
            (str(c.get("type")), str(c.get("status")), str(c.get("message", ""))[:512])
            for c in status.get("conditions") or []
            if isinstance(c, dict) and (c.get("type") in AGENT_CONDITIONS or c.get("type") == "Ready")
        )
    )
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    return (
        conditions,
        str(annotations.get(names.PREFLIGHT_FAILURE_ANNOTATION, ""))[:512],
        str(annotations.get(names.DEEP_CHECK_ANNOTATION, ""))[:512],
        str(labels.get(names.MAINTENANCE_LABEL, "")),
        str(labels.get(names.WARDEN_OPT_OUT_LABEL, "")),
        str((status.get("capacity") or {}).get(names.GPU_RESOURCE, "")),
        str((status.get("allocatable") or {}).get(names.GPU_RESOURCE, "")),
        str((status.get("nodeInfo") or {}).get("bootID", "")),
    )
