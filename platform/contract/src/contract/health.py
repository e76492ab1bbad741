"""The node-health contract: preflight's failure report, Warden's deep-check record and Warden's node
Events, one codec each.

Report (`dump_report` / `load_report`): the first failing check of a preflight run, as preflight writes
it to its termination log (the kubelet copies it into the pod's status) and to the Node annotation
names.PREFLIGHT_FAILURE_ANNOTATION. It names the failing GPU where the check knows it. Warden and gkr
read it only through `load_report`; tests build it only through preflight's encoder.

DeepCheck (`dumps` / `loads`): a node's last deep check, as Warden records it on the Node
(names.DEEP_CHECK_ANNOTATION) after a burn-in, an idle sweep or a verification it ran itself;
`gkr health` and dashboards read it.

NodeEvent (`dump_event` / `load_event`): what one of Warden's Events about a Node says, as a typed
record in the Event's annotation names.NODE_EVENT_ANNOTATION beside the message people read; the
faults in it (`Fault`) are also what Warden's reason text holds (`faults_text` / `parse_faults`).
`gkr health` counts failures from the record, never from the message.

All are hand-editable by someone (a tenant writes its own termination log; anyone with Node patch
rights the annotations), so readers decode strictly (contract.codec: unknown fields, wrong types,
other schema versions, oversized text are refused, then ranges are checked) and treat a refused
document as nothing: "never checked", never a pass, and never a verdict about a node.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from typing import Literal, TypeVar

from contract import codec, names
from contract.problem import Invalid

T = TypeVar("T")

SCHEMA = "meridian.deepcheck/v1"
MAX_BYTES = 16 * 1024  # Warden keeps the evidence short; anything longer was not written by it
MAX_GPU = 63  # a GPU index beyond any machine's: not a GPU
MAX_TIME = 4_102_444_800.0  # 2100-01-01T00:00:00Z

# "verify": a check Warden ran because a tenant's report asked for one (warden.verify).
CheckKind = Literal["burn_in", "sweep", "verify"]
Verdict = Literal["pass", "fail"]


@dataclass(frozen=True, kw_only=True)
class Failure:
    check: str  # preflight's check name: "dcgm-diag", "nccl-multinode", "rdma-links" (preflight.deep.CHECKS), ...
    gpu: int | None = None  # the GPU index, when the failure is one GPU's
    evidence: str = ""  # one line: the failing test and what it measured


@dataclass(frozen=True, kw_only=True)
class DeepCheck:
    time: float  # unix seconds when the check finished
    kind: CheckKind
    verdict: Verdict
    level: int = 2  # DCGM diagnostic run level (2 for sweeps, 3 for burn-in)
    failures: tuple[Failure, ...] = ()


FIX = "Warden writes it again after the node's next deep check; remove the annotation to have it checked"


def _decode(cls: type[T], text: str, schema: str, max_bytes: int, whose: str, where: str, fix: str) -> T:
    """A document of `cls`, strictly (contract.codec), refused unread when longer than its writer writes."""
    if len(text.encode()) > max_bytes:
        raise Invalid([f"{where}: longer than {max_bytes} bytes, so not {whose}; {fix}"])
    return codec.loads(cls, text, schema, where, fix)


def dumps(check: DeepCheck) -> str:
    return codec.dumps(check, SCHEMA, indent=None)


def loads(text: str, where: str) -> DeepCheck:
    """Decode an annotation; raises contract.problem.Invalid (one line naming ``where``) on anything else."""
    check = _decode(DeepCheck, text, SCHEMA, MAX_BYTES, "Warden's", where, FIX)
    _in_range(where, check.time, [f.gpu for f in check.failures], FIX)
    return check


# --- preflight's report ---------------------------------------------------------------------------

REPORT_SCHEMA = "meridian.preflight-failure/v1"
REPORT_MAX_BYTES = 4096  # what the kubelet keeps of a termination message; the annotation uses the same bound
REPORT_FIX = "it is written by `preflight run` (--termination-log, --annotate); run it again"


@dataclass(frozen=True, kw_only=True)
class Report:
    """The first failing check of a preflight run."""

    check: str  # preflight's check name
    summary: str  # one line
    time: float  # unix seconds when preflight finished
    gpu: int | None = None  # the failing GPU's index, when the check knows it (DCGM, nvidia-smi)
    evidence: tuple[str, ...] = ()  # the first lines of the check's evidence


def dump_report(report: Report, max_bytes: int = REPORT_MAX_BYTES) -> str:
    """One JSON line within max_bytes: evidence lines go first (last first), then the summary is cut."""
    text = codec.dumps(report, REPORT_SCHEMA, indent=None)
    while len(text.encode()) > max_bytes and report.evidence:
        report = replace(report, evidence=report.evidence[:-1])
        text = codec.dumps(report, REPORT_SCHEMA, indent=None)
    if len(text.encode()) > max_bytes:
        # Cut by bytes of the escaped JSON: what a character costs there is known only after encoding it.
        spare = max_bytes - len(codec.dumps(replace(report, summary=""), REPORT_SCHEMA, indent=None).encode())
        summary = report.summary
        while summary and (cost := len(json.dumps(summary).encode()) - 2) > spare:
            summary = summary[: min(len(summary) - 1, len(summary) * max(0, spare) // cost)]
        text = codec.dumps(replace(report, summary=summary), REPORT_SCHEMA, indent=None)
    return text


def load_report(text: str, where: str) -> Report:
    """Decode a termination message or annotation; Invalid (one line naming ``where``) on anything else."""
    report = _decode(Report, text, REPORT_SCHEMA, REPORT_MAX_BYTES, "preflight's", where, REPORT_FIX)
    if not names.is_check_name(report.check):
        raise Invalid([f"{where}: check: {report.check[:64]!r} is not a check name; {REPORT_FIX}"])
    _in_range(where, report.time, [report.gpu], REPORT_FIX)
    return report


def _in_range(where: str, time: float, gpus: list[int | None], fix: str) -> None:
    if not (math.isfinite(time) and 0 <= time <= MAX_TIME):
        raise Invalid([f"{where}: time: {time!r} is not a time between 1970 and 2100; {fix}"])
    bad = next((g for g in gpus if g is not None and not 0 <= g <= MAX_GPU), None)
    if bad is not None:
        raise Invalid([f"{where}: gpu: {bad} is not a GPU index (0-{MAX_GPU}); {fix}"])


# --- Warden's node Events ----------------------------------------------------------------------------

EVENT_SCHEMA = "meridian.node-event/v1"
EVENT_MAX_BYTES = 4096
EVENT_FIX = "Warden writes it with each Event about a node; an Event without a readable record counts as nothing"
MAX_FAULTS = 16
FAULT_KIND = re.compile(r"[a-z][a-z_ ]{0,31}")
_FAULT = re.compile(r"([a-z][a-z_ ]{0,31}?)(?: (\d{1,6}))?")

# left_healthy: a healthy node went out of service for these faults; restart_pods: Warden restarted the
# GPU pods for an Xid that needs no more; probation_failed: the node failed its check; other: the rest
# (the next phase of the same fault, a burn-in, a return to service), which report no new failure.
EventChange = Literal["left_healthy", "restart_pods", "probation_failed", "other"]


@dataclass(frozen=True, kw_only=True)
class Fault:
    kind: str  # a contract.signals kind ("xid", "nccl_errors", "preflight"...), or "probation failed"
    code: int | None = None  # the Xid or SXid number


@dataclass(frozen=True, kw_only=True)
class NodeEvent:
    change: EventChange
    before: str = ""  # the node's Warden phase before the Event's change, and after it
    after: str = ""
    faults: tuple[Fault, ...] = ()


def faults_text(faults: tuple[Fault, ...] | list[Fault]) -> str:
    """Warden's reason text: "xid 79; nccl_errors"."""
    return "; ".join(f"{f.kind}{'' if f.code is None else ' ' + str(f.code)}" for f in faults)


def parse_faults(text: str) -> tuple[Fault, ...]:
    """The faults of a reason text `faults_text` wrote; parts it could not have written are left out."""
    out = []
    for part in text.split(";")[:MAX_FAULTS]:
        m = _FAULT.fullmatch(part.strip())
        if m:
            out.append(Fault(kind=m[1], code=None if m[2] is None else int(m[2])))
    return tuple(out)


def dump_event(event: NodeEvent) -> str:
    return codec.dumps(event, EVENT_SCHEMA, indent=None)


def load_event(text: str, where: str) -> NodeEvent:
    """Decode an Event's record; Invalid (one line naming ``where``) on anything else."""
    event = _decode(NodeEvent, text, EVENT_SCHEMA, EVENT_MAX_BYTES, "Warden's", where, EVENT_FIX)
    if len(event.faults) > MAX_FAULTS:
        raise Invalid([f"{where}: faults: more than {MAX_FAULTS}; {EVENT_FIX}"])
    for fault in event.faults:
        if not FAULT_KIND.fullmatch(fault.kind) or (fault.code is not None and not 0 <= fault.code < 10**6):
            raise Invalid([f"{where}: faults: {fault.kind[:32]!r} {fault.code!r} is not a fault; {EVENT_FIX}"])
    return event
