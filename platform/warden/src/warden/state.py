"""The per-node state machine, as a pure function, and its record on the Node.

    healthy -> suspect -> quarantined -> draining -> remediating -> probation -> healthy
                                     \\-> held (a person decides)

A node whose fault asks only for restarting the job's pods stays healthy. A
suspect waits for the safety budget before it is quarantined (cordoned and
tainted). Draining evicts pods with a grace period; remediating reboots or
replaces within the concurrency caps; probation runs preflight before the
node returns. Repeat offenders (policy.repeat_count remediations within
policy.repeat_window_s) are held for review, and a reboot that did not help
escalates to a replacement.

Everything Warden knows about a node lives in the Node's own annotation
(names.WARDEN_RECORD_ANNOTATION) and label (names.WARDEN_PHASE_LABEL), so a
restarted Warden neither forgets nor repeats: a reboot is asked for once,
with the boot id it must change.

A replacement first reports the host as faulty (Compute Engine's
reportHostAsFaulty) and recreates the VM only once the report's operation is
DONE, whatever its outcome, Compute Engine refused the report, or
HOST_REPORT_WAIT_S passed: recreating the VM under a running report ends the
report in INTERNAL_ERROR. Spot and flex-start VMs, which Compute Engine takes
no report for, are recreated at once (issue 38; contract.warden).

Burn-in (issue 21): a node that joins (no record, no deep check, created
within policy.burn_in_max_age_s) and is idle goes straight to probation,
cordoned, flagged `burn_in`; its deep check starts when the pool's burn-in
concurrency allows. Such a node never served, so it does not count against
the circuit breaker (controller). Its failure takes the policy's action for
a failed preflight, as any other node's would. Every probation runs the
burn-in deep check when policy.burn_in is set (warden.actions).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from contract import health, names
from contract.signals import ACTIONS, SEVERITY, Action
from contract.warden import HOST_REPORT_WAIT_S
from warden.policy import Policy, Signal

PHASES = ("healthy", "suspect", "quarantined", "draining", "remediating", "probation", "held")
# What a record Warden wrote can hold; anything outside is not Warden's writing and holds the node.
MAX_TIME = 4_102_444_800.0  # 2100-01-01T00:00:00Z
MAX_RECORD_BYTES = 64 * 1024
MAX_REASON = 2048
MAX_BOOT_ID = 128
MAX_REMEDIATIONS = 64  # more than any repeat-offender window needs; older ones are dropped on write
# Record.report: the host report a replacement waits for. REPORT_SENT before Compute Engine named its
# operation (or when its answer was lost), REPORT_REFUSED when it answered with an error, else the operation's
# name: a Compute Engine resource name (lowercase letters, digits, '-'), read back into a request's path.
REPORT_SENT, REPORT_REFUSED = "sent", "refused"
_OPERATION_MAX = 128  # Compute Engine's operation names are longer than its other resources' 63


def is_operation(report: str) -> bool:
    """Whether Record.report names an operation to poll (rather than being empty or a marker)."""
    return report not in ("", REPORT_SENT, REPORT_REFUSED) and names.is_dns1035_label(report, _OPERATION_MAX)


class Unreadable(ValueError):
    pass


def _time(value: Any, name: str) -> float:
    # bool is an int in Python; JSON's true is not a time.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Unreadable(f"{name}: not a number")
    if not math.isfinite(value) or not 0 <= value <= MAX_TIME:
        raise Unreadable(f"{name}: {value!r} is not a time between 1970 and 2100")
    return float(value)


def _text(value: Any, name: str, limit: int) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise Unreadable(f"{name}: not a string of at most {limit} characters")
    return value


def _report(value: Any) -> str:
    if not isinstance(value, str) or not (value in ("", REPORT_SENT, REPORT_REFUSED) or is_operation(value)):
        raise Unreadable(f"report: {str(value)[:40]!r} is not an operation's name, {REPORT_SENT} or {REPORT_REFUSED}")
    return value


def _choice(value: Any, name: str, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise Unreadable(f"{name}: {str(value)[:40]!r} is not one of {', '.join(allowed)}")
    return value


@dataclass(frozen=True)
class Record:
    phase: str = "healthy"
    since: float = 0.0
    action: str = "none"  # the remediation planned for this fault
    reason: str = ""
    boot_id: str = ""  # the boot id a requested reboot must change
    remediations: tuple[float, ...] = ()  # when past remediations started
    handled: float = 0.0  # one-off signals up to this time were dealt with
    # The node was already unschedulable, without Warden's record, when Warden cordoned it:
    # a person's cordon, which returning the node must leave in place.
    person_cordon: bool = False
    # A node that joined and has not yet passed its first burn-in: out of service, but never counted
    # by the circuit breaker (it never took a job); the flag goes when the node first returns.
    burn_in: bool = False
    # In `remediating`: the host report the VM's recreate waits for (REPORT_SENT, REPORT_REFUSED or its
    # operation's name); "" when there is none, or the recreate was asked.
    report: str = ""

    def to_annotations(self) -> tuple[dict[str, str], dict[str, str]]:
        """(labels, annotations) to write on the Node, always within what from_annotations accepts."""
        kept = replace(self, reason=self.reason[:MAX_REASON], remediations=self.remediations[-MAX_REMEDIATIONS:])
        return {names.WARDEN_PHASE_LABEL: self.phase}, {
            names.WARDEN_RECORD_ANNOTATION: json.dumps(asdict(kept), sort_keys=True)
        }

    @staticmethod
    def from_annotations(annotations: dict[str, str]) -> Record:
        return read_record(annotations)[0]


def read_record(annotations: dict[str, str]) -> tuple[Record, str | None]:
    """The record on a Node, and why it could not be read (then the node is held for a person).

    Every field is checked (type, enum, range): the annotation is input like any other, and a
    record Warden did not write, or that was damaged, must never be acted on by guessing.
    Fields a later Warden may add are ignored; a record without a phase is not a record.
    """
    raw = annotations.get(names.WARDEN_RECORD_ANNOTATION)
    if not raw:
        return _NO_RECORD
    return _parse(raw) if isinstance(raw, str) else _parse(None)


_NO_RECORD: tuple[Record, str | None] = (Record(), None)  # frozen: one instance serves every healthy node


@functools.lru_cache(maxsize=8192)
def _parse(raw: str | None) -> tuple[Record, str | None]:
    # Cached: a round reads every Node's record and most are the same text as last round (Records are frozen).
    try:
        if not isinstance(raw, str) or len(raw) > MAX_RECORD_BYTES:
            raise Unreadable("too long")
        data = json.loads(raw)  # RecursionError for absurd nesting; ValueError for huge ints or bad JSON
        if not isinstance(data, dict):
            raise Unreadable("not a JSON object")
        remediations = data.get("remediations", [])
        if not isinstance(remediations, list) or len(remediations) > MAX_REMEDIATIONS:
            raise Unreadable(f"remediations: not a list of at most {MAX_REMEDIATIONS} times")
        person_cordon, burn_in = data.get("person_cordon", False), data.get("burn_in", False)
        if not isinstance(person_cordon, bool) or not isinstance(burn_in, bool):
            raise Unreadable("person_cordon, burn_in: not true or false")
        record = Record(
            phase=_choice(data.get("phase"), "phase", PHASES),
            since=_time(data.get("since", 0.0), "since"),
            action=_choice(data.get("action", "none"), "action", ACTIONS),
            reason=_text(data.get("reason", ""), "reason", MAX_REASON),
            boot_id=_text(data.get("boot_id", ""), "boot_id", MAX_BOOT_ID),
            remediations=tuple(_time(t, "remediations[]") for t in remediations),
            handled=_time(data.get("handled", 0.0), "handled"),
            person_cordon=person_cordon,
            burn_in=burn_in,
            report=_report(data.get("report", "")),
        )
    except (ValueError, RecursionError) as error:  # Unreadable is a ValueError
        why = f"unreadable {names.WARDEN_RECORD_ANNOTATION} annotation: {str(error)[:200]}"
        return Record(phase="held", reason=why), why  # a person decides
    return record, None


@dataclass(frozen=True)
class HostReport:
    """A host report's operation as Compute Engine last answered: DONE or not, and its errors once DONE."""

    done: bool = False
    error: str = ""  # Compute Engine's error codes, when it ended in error


@dataclass(frozen=True)
class Facts:
    """What the adapters observed about the node this round."""

    ready: bool = True
    boot_id: str = ""
    pods: int = 0  # pods still running there, other than DaemonSets
    preflight: str | None = None  # "pass" or "fail" once a probation preflight finished
    opted_out: bool = False
    cordoned_by_other: bool = False  # unschedulable without Warden's taint: someone else cordoned it
    joined: bool = False  # new to Warden: no record, no deep check, created within burn_in_max_age_s
    idle: bool = False  # no job's pod uses its GPUs (as of the last pod listing)
    check_missing: bool = False  # on probation and no deep check Job exists for it
    # Compute Engine takes a host report for it: not a spot or flex-start VM (GKE's labels, observe.reportable).
    reportable: bool = True
    report: HostReport | None = None  # the host report's operation, when one was read this round


@dataclass(frozen=True)
class Budget:
    """Whether the safety limits allow one more quarantine, and one more remediation, in the node's pool."""

    may_quarantine: bool
    may_remediate: bool
    may_burn_in: bool = True  # the pool's burn-in concurrency allows one more joining node's check


@dataclass(frozen=True)
class Command:
    verb: str  # cordon, evict, reboot, replace, report_faulty, preflight, uncordon, restart_pods, event
    detail: str = ""
    record: health.NodeEvent | None = None  # an event's typed record (else: "other")


@dataclass(frozen=True)
class Decision:
    record: Record
    commands: tuple[Command, ...] = field(default_factory=tuple)


def _worst(actions: list[Action]) -> Action:
    return max(actions, key=lambda a: SEVERITY[a]) if actions else "none"


def _repeat_offender(record: Record, now: float, policy: Policy) -> bool:
    recent = [t for t in record.remediations if now - t <= policy.repeat_window_s]
    return len(recent) >= policy.repeat_count


@dataclass(frozen=True)
class _Seen:
    """What a phase's step works from besides the record: this round's facts and limits, and the signals' verdict."""

    facts: Facts
    now: float
    policy: Policy
    budget: Budget
    signals: tuple[Signal, ...]  # on a healthy node, only those not dealt with yet
    action: Action  # the worst action the signals call for
    faults: tuple[health.Fault, ...]
    reason: str  # the faults as text, for the record and its Events


def decide(record: Record, signals: list[Signal], facts: Facts, now: float, policy: Policy, budget: Budget) -> Decision:
    """The next state of one node and what to do to it. Calling it again with the same inputs asks for nothing new."""
    if facts.opted_out and record.phase in ("healthy", "suspect"):
        return Decision(record)
    if record.phase == "healthy":
        signals = [s for s in signals if not s.at or s.at > record.handled]
    action = _worst([policy.action_for(s.kind, s.code) for s in signals])
    faults = tuple(health.Fault(kind=s.kind, code=s.code) for s in signals)
    seen = _Seen(facts, now, policy, budget, tuple(signals), action, faults, health.faults_text(faults))
    return _STEPS.get(record.phase, _held)(record, seen)


def _healthy(record: Record, seen: _Seen) -> Decision:
    """Nothing new, a join to burn in, pods to restart in place, or a suspect (held for review if it keeps failing)."""
    if seen.action == "none":
        if seen.policy.burn_in and seen.facts.joined and seen.facts.idle:
            return _join(record, seen.now, seen.budget, seen.facts.cordoned_by_other)
        return Decision(record)
    if seen.action == "restart_pods":
        handled = replace(record, handled=max(record.handled, *(s.at for s in seen.signals)))
        told = health.NodeEvent(change="restart_pods", faults=seen.faults)
        return Decision(
            handled, (Command("restart_pods", seen.reason), Command("event", f"restarting pods: {seen.reason}", told))
        )
    action = "review" if _repeat_offender(record, seen.now, seen.policy) else seen.action
    suspect = replace(record, phase="suspect", since=seen.now, action=action, reason=seen.reason)
    return decide_suspect(suspect, seen.now, seen.budget, seen.facts.cordoned_by_other)


def _suspect(record: Record, seen: _Seen) -> Decision:
    """A worse fault raises the planned action; the quarantine waits for the safety budget."""
    if SEVERITY[seen.action] > SEVERITY[record.action]:
        record = replace(record, action=seen.action, reason=f"{record.reason}; {seen.reason}")
    return decide_suspect(record, seen.now, seen.budget, seen.facts.cordoned_by_other)


def _quarantined(record: Record, seen: _Seen) -> Decision:
    if record.action == "review":
        return Decision(
            replace(record, phase="held", since=seen.now), (Command("event", f"held for review: {record.reason}"),)
        )
    draining = replace(record, phase="draining", since=seen.now)
    return Decision(draining, (Command("evict", f"grace {seen.policy.drain_grace_s:.0f}s"),))


def _draining(record: Record, seen: _Seen) -> Decision:
    """Once drained (or the grace period is over) and the concurrency caps allow: reboot or replace."""
    drained = seen.facts.pods == 0 or seen.now - record.since >= seen.policy.drain_grace_s
    if not drained or not seen.budget.may_remediate:
        return Decision(record)
    remediating = replace(
        record,
        phase="remediating",
        since=seen.now,
        boot_id=seen.facts.boot_id,
        remediations=(*record.remediations, seen.now),
    )
    if record.action != "replace":
        return Decision(replace(remediating, report=""), (Command("reboot", record.reason),))
    if not seen.facts.reportable:  # Compute Engine refuses a report for spot and flex-start VMs: none to wait for
        return Decision(replace(remediating, report=""), (Command("replace", f"{record.reason} (no host report)"),))
    # The report alone: the VM stays until its operation is DONE (_reporting), or a recreate would end it.
    return Decision(replace(remediating, report=REPORT_SENT), (Command("report_faulty", record.reason),))


def _remediating(record: Record, seen: _Seen) -> Decision:
    """Back (ready, with a new boot id): probation; past the timeout: ask again."""
    back = seen.facts.ready and seen.facts.boot_id != record.boot_id
    if back:
        probation = replace(record, phase="probation", since=seen.now, report="")
        return Decision(probation, (Command("preflight", "probation"),))
    if record.report:
        return _reporting(record, seen)
    if seen.now - record.since < seen.policy.remediate_timeout_s:
        return Decision(record)
    # The request was lost (an API error, a Warden restart before it left): the node never
    # went down, so asking again cannot double a reboot.
    verb = "replace" if record.action == "replace" else "reboot"
    return Decision(replace(record, since=seen.now), (Command(verb, f"retry: {record.reason}"),))


def _reporting(record: Record, seen: _Seen) -> Decision:
    """Recreate once the host report's operation is DONE (an error is told, not waited on), Compute Engine
    refused the report, or HOST_REPORT_WAIT_S passed with no DONE seen (stuck, unreadable or never named)."""
    found, waited = seen.facts.report, seen.now - record.since
    if record.report == REPORT_REFUSED:
        outcome = "refused by Compute Engine"
    elif found is not None and found.done:
        outcome = f"done with {found.error}" if found.error else "done"
    elif waited >= HOST_REPORT_WAIT_S:
        outcome = f"not done after {waited:.0f}s"
    else:
        return Decision(record)  # its operation still runs, or could not be read this round
    told = f"host report {outcome}: recreating the VM"
    replacing = replace(record, since=seen.now, report="")  # remediate_timeout_s counts from the recreate
    return Decision(replacing, (Command("replace", f"{told} ({record.reason})"), Command("event", told)))


def _probation(record: Record, seen: _Seen) -> Decision:
    """A passed check returns the node; a failed one quarantines it again, one step up."""
    now = seen.now
    if seen.facts.preflight is None:
        if record.burn_in and seen.facts.check_missing and seen.budget.may_burn_in:
            return Decision(record, (Command("preflight", "burn-in"),))  # its turn within the pool's bound
        return Decision(record)
    if seen.facts.preflight == "pass":
        healthy = replace(
            record, phase="healthy", since=now, action="none", reason="", boot_id="", handled=now, burn_in=False
        )
        return Decision(healthy, (Command("uncordon"), Command("event", "returned to service after probation")))
    escalated = _after_failed_check(record, now, seen.policy)
    failed = health.NodeEvent(change="probation_failed", faults=(health.Fault(kind="probation failed"),))
    return Decision(
        replace(record, phase="quarantined", since=now, action=escalated, reason=f"{record.reason}; probation failed"),
        (Command("event", f"probation failed: escalating to {escalated}", failed),),
    )


def _held(record: Record, seen: _Seen) -> Decision:
    return Decision(record)  # until a person clears the record


_STEPS: dict[str, Callable[[Record, _Seen], Decision]] = {
    "healthy": _healthy,
    "suspect": _suspect,
    "quarantined": _quarantined,
    "draining": _draining,
    "remediating": _remediating,
    "probation": _probation,
    "held": _held,
}


def carried_out(before: Record, decision: Decision, policy: Policy) -> bool:
    """Whether Warden carries `decision` out, or only logs it as a dry run would.

    Under `act_on: unambiguous` (a new fleet's default, contract.warden) a healthy node leaves service
    only for faults that are all unambiguous (policy.unambiguous); anything else about a healthy node
    (an NCCL report, a failed preflight, an application Xid, a burn-in) is logged and decided again
    next round. A node Warden already took out of service is seen through to the end: stopping
    half-way would leave it cordoned with nobody acting.
    """
    if policy.dry_run:
        return False
    if policy.act_on == "all" or before.phase != "healthy":
        return True
    parts = decision.record.reason.split(";")
    faults = health.parse_faults(decision.record.reason)
    return len(faults) == len(parts) and all(policy.unambiguous(f.kind, f.code) for f in faults)


def _after_failed_check(record: Record, now: float, policy: Policy) -> Action:
    """What a failed probation or burn-in calls for: the next step up from the remediation that was tried.

    A joining node's burn-in tried nothing yet: the policy's action for a failed preflight, at least a
    reboot (a node that failed a deep check cannot simply return).
    """
    if record.action == "replace" or _repeat_offender(record, now, policy):
        return "review"
    if record.action == "none":
        return _worst([policy.action_for("preflight"), "reboot"])
    return "replace"


def _join(record: Record, now: float, budget: Budget, cordoned_by_other: bool) -> Decision:
    """A joining node: out of service until its burn-in passes; the check starts when the pool's bound allows."""
    joining = replace(
        record, phase="probation", since=now, reason="burn-in", burn_in=True, person_cordon=cordoned_by_other
    )
    commands = [Command("cordon", "burn-in"), Command("event", "joined: out of service until its burn-in passes")]
    if budget.may_burn_in:
        commands.append(Command("preflight", "burn-in"))
    return Decision(joining, tuple(commands))


def decide_suspect(record: Record, now: float, budget: Budget, cordoned_by_other: bool = False) -> Decision:
    if not budget.may_quarantine:
        return Decision(record)  # the circuit breaker holds: stay suspect, try again next round
    quarantined = replace(record, phase="quarantined", since=now, person_cordon=cordoned_by_other)
    return Decision(
        quarantined,
        (Command("cordon", record.reason), Command("event", f"quarantined ({record.action}): {record.reason}")),
    )
