"""A person's commands for Warden: hold a node, release it, report it, list the held ones with why.

Each is one merge patch of the Node, computed here from the Node as read (pure), written with its
resourceVersion as a precondition so that a Warden round in between is never overwritten (409: read
again and retry). They write only what Warden already reads:

- hold: Warden's record (names.WARDEN_RECORD_ANNOTATION, phase `held`) and phase label, Warden's
  cordon and taint. Warden leaves a held node alone (state._held) until a person releases it.
- release: a held node goes to probation flagged as a burn-in, so Warden itself runs the deep check
  and returns the node only if it passes (state._probation); `--skip-check` returns it at once
  (Warden's taint off, uncordoned unless a person had cordoned it before).
- report: preflight's failure annotation (names.PREFLIGHT_FAILURE_ANNOTATION, check `operator-report`),
  which only principals that may patch Nodes can write (warden/trust.py): Warden's fault table's
  action for a failed preflight (a reboot). Under `act_on: unambiguous` Warden only logs it; hold the
  node to take it out of service now.

Every command appends who, when, what and why to the Node's audit annotation
(names.WARDEN_AUDIT_ANNOTATION): the newest MAX_AUDIT entries, each reason cut to MAX_WHY characters.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from contract import health, names
from warden.actions import TAINT
from warden.state import Record, read_record

MAX_AUDIT = 20  # entries kept on the Node; older ones are in the API server's audit log
MAX_WHY = 256
REPORT_CHECK = "operator-report"


class Refused(ValueError):
    """The command does not apply to the node as it is (one line for the person)."""


@dataclass(frozen=True)
class Entry:
    who: str
    at: float
    verb: str
    why: str


def audit_trail(node: dict[str, Any]) -> list[Entry]:
    """The Node's audit entries, oldest first; an unreadable annotation is an empty trail (it is rewritten)."""
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(names.WARDEN_AUDIT_ANNOTATION, "")
    try:
        items = json.loads(raw) if isinstance(raw, str) and len(raw) < 64 * 1024 else []
    except (ValueError, RecursionError):
        return []
    keys = ("who", "at", "verb", "why")
    ok = isinstance(items, list) and all(isinstance(i, dict) and all(k in i for k in keys) for i in items)
    return [Entry(str(i["who"]), float(i["at"]), str(i["verb"]), str(i["why"])) for i in items] if ok else []


def _audit(node: dict[str, Any], entry: Entry) -> str:
    kept = [*audit_trail(node), replace(entry, why=entry.why[:MAX_WHY])][-MAX_AUDIT:]
    return json.dumps([asdict(e) for e in kept], sort_keys=True)


def _base(node: dict[str, Any], entry: Entry, record: Record | None) -> dict[str, Any]:
    meta = node.get("metadata") or {}
    annotations: dict[str, str | None] = {names.WARDEN_AUDIT_ANNOTATION: _audit(node, entry)}
    patch: dict[str, Any] = {"metadata": {"annotations": annotations}}
    if record is not None:
        labels, written = record.to_annotations()
        annotations.update(written)
        patch["metadata"]["labels"] = labels
    if version := str(meta.get("resourceVersion") or ""):
        patch["metadata"]["resourceVersion"] = version
    return patch


def _others(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != TAINT["key"]]


def hold(node: dict[str, Any], who: str, why: str, now: float) -> dict[str, Any]:
    """Out of service for a person: Warden's record says held, Warden's cordon and taint on."""
    record, _ = read_record(((node.get("metadata") or {}).get("annotations")) or {})
    spec = node.get("spec") or {}
    by_person = bool(spec.get("unschedulable")) and not any(
        t.get("key") == TAINT["key"] for t in spec.get("taints") or []
    )
    held = replace(
        record, phase="held", since=now, reason=f"held by {who}: {why}", person_cordon=record.person_cordon or by_person
    )
    patch = _base(node, Entry(who, now, "hold", why), held)
    patch["spec"] = {"unschedulable": True, "taints": [*_others(node), TAINT]}
    return patch


def release(node: dict[str, Any], who: str, why: str, now: float, skip_check: bool = False) -> dict[str, Any]:
    """A held node back to Warden: through its deep check (probation, burn-in), or at once with skip_check."""
    record, unreadable = read_record(((node.get("metadata") or {}).get("annotations")) or {})
    if record.phase != "held":
        raise Refused(f"is {record.phase}, not held: Warden is acting on it; hold it first to take it over")
    fresh = Record(remediations=record.remediations, person_cordon=record.person_cordon)  # keeps repeat history
    if unreadable:
        fresh = Record(person_cordon=False)  # the unreadable record is replaced whole
    if skip_check:
        patch = _base(node, Entry(who, now, "release", f"{why} (no check)"), replace(fresh, since=now, handled=now))
        spec: dict[str, Any] = {"taints": _others(node)}
        if not fresh.person_cordon:
            spec["unschedulable"] = False
        patch["spec"] = spec
        patch["metadata"]["annotations"][names.PREFLIGHT_FAILURE_ANNOTATION] = None
        return patch
    probation = replace(fresh, phase="probation", since=now, reason=f"released by {who}: {why}", burn_in=True)
    return _base(node, Entry(who, now, "release", why), probation)


def report(node: dict[str, Any], who: str, why: str, now: float) -> dict[str, Any]:
    """A person's report: preflight's failure annotation, which Warden trusts from those who may patch Nodes."""
    text = health.dump_report(health.Report(check=REPORT_CHECK, summary=f"{who}: {why}"[:512], time=now))
    patch = _base(node, Entry(who, now, "report", why), None)
    patch["metadata"]["annotations"][names.PREFLIGHT_FAILURE_ANNOTATION] = text
    return patch


def held_rows(nodes: list[dict[str, Any]], now: float) -> list[tuple[str, str, str, str, str]]:
    """(node, pool, held for, why, last person's entry) for every held node, by name."""
    rows = []
    for node in sorted(nodes, key=lambda n: str((n.get("metadata") or {}).get("name"))):
        meta = node.get("metadata") or {}
        record, unreadable = read_record(meta.get("annotations") or {})
        if record.phase != "held":
            continue
        trail = audit_trail(node)
        last = f"{trail[-1].verb} by {trail[-1].who} {_ago(now - trail[-1].at)} ago" if trail else "-"
        pool = str((meta.get("labels") or {}).get(names.NODE_POOL_LABEL, "-"))
        since = _ago(now - record.since) if record.since else "?"
        rows.append((str(meta.get("name")), pool, since, unreadable or record.reason or "-", last))
    return rows


def _ago(seconds: float) -> str:
    s = max(0, int(seconds))
    return f"{s // 86400}d{s % 86400 // 3600}h" if s >= 86400 else f"{s // 3600}h{s % 3600 // 60}m"


def table(rows: list[tuple[str, str, str, str, str]]) -> str:
    if not rows:
        return "no node is held"
    head = ("NODE", "POOL", "HELD FOR", "WHY", "LAST PERSON")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    return "\n".join(
        "  ".join([*(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)), r[4]]) for r in [head, *rows]
    )


def now() -> float:
    return time.time()


def whoami(kube: Any) -> str:
    """Who the API server says the caller is (a SelfSubjectReview, authentication.k8s.io/v1, GA since 1.28)."""
    review = kube.create(
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    return str(((review.get("status") or {}).get("userInfo") or {}).get("username") or "unknown")
