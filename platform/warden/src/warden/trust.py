"""Signals from tenants' pods, checked against what the cluster itself attests, turned into requests (pure).

A team can create Events in its namespace and name any node in them, so an
NCCLFailure Event counts only when the pod it names exists, in the Event's own
namespace, and the scheduler bound it to the node the Event names; each pod
counts once per window whatever the Event's `count` says. A preflight failure
counts only from a pod's status, which the kubelet of the pod's node writes
(tenants cannot write pod status), for the node in the pod's spec.nodeName.
Everything else is ignored and counted, so a forger shows up in the metrics.

Even what counts is only a claim: a pod's spec.nodeName can be set by its team
(an admission rule now refuses it for team pods, fleet/gitops/admission.py),
and what a pod writes to its own termination log is whatever it wants. So
what passes here becomes a verify.Request, attributed to the namespace that
made it: Warden then checks the node itself (warden.verify) and acts on its
own check alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from contract import health, names
from contract.problem import Invalid
from warden.observe import parse_time
from warden.verify import Request

PREFLIGHT_CONTAINER = "preflight"  # gkr's init container
MAX_POD_LOOKUPS = 500  # per round: a flood of Events naming made-up pods cannot turn into a flood of GETs
FUTURE_SLACK_S = 300.0  # an Event's times are its creator's: one dated further ahead would count forever

PodLookup = Callable[[str, str], "dict[str, Any] | None"]
Key = tuple[str, str]  # (node, namespace that reported)


@dataclass
class Verdicts:
    """What a round makes of tenants' reports: per node and reporting namespace, and what it refused and why."""

    nccl: Counter[Key] = field(default_factory=Counter)  # distinct pods reporting within the window
    nccl_at: dict[Key, float] = field(default_factory=dict)  # the newest such report
    preflight: dict[Key, tuple[health.Report, float]] = field(default_factory=dict)  # the latest failure, when
    ignored: Counter[str] = field(default_factory=Counter)  # reason -> reports ignored

    def requests(self, nccl_threshold: int) -> list[Request]:
        """One request per node and namespace: a failed preflight, or nccl_threshold pods reporting NCCL failures."""
        found = [
            Request(node, namespace, "preflight", when, _what(report))
            for (node, namespace), (report, when) in self.preflight.items()
        ]
        found += [
            Request(node, namespace, "nccl", self.nccl_at[node, namespace], f"{pods} pods reported NCCL failures")
            for (node, namespace), pods in self.nccl.items()
            if pods >= max(1, nccl_threshold) and (node, namespace) not in self.preflight
        ]
        return sorted(found, key=lambda r: (r.at, r.namespace, r.node))


def _what(report: health.Report) -> str:
    return f"{report.check}{'' if report.gpu is None else f' gpu {report.gpu}'}"


def _event_time(event: dict[str, Any]) -> float:
    return parse_time(str(event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp") or ""))


def nccl_failures(
    events: Iterable[dict[str, Any]], lookup: PodLookup, now: float, window_s: float, verdicts: Verdicts
) -> None:
    """Count each pod on its node once, when the pod really runs there; ignore the rest by reason.

    `events` may be a page-at-a-time iterator over a list of any length: nothing here keeps an Event, and what
    is kept (each pod looked up as its uid and node only, the pods counted) is bounded by MAX_POD_LOOKUPS.
    """
    pods: dict[tuple[str, str], tuple[Any, Any] | None] = {}
    seen: set[tuple[str, str, str]] = set()
    for event in events:
        if not isinstance(event, dict) or event.get("reason") != names.NCCL_FAILURE_REASON:
            continue
        at = _event_time(event)
        if now - at > window_s:
            continue  # old news, not a forgery
        if at > now + FUTURE_SLACK_S:
            verdicts.ignored["nccl_future"] += 1
            continue
        involved, source = event.get("involvedObject"), event.get("source")
        if not isinstance(involved, dict) or not isinstance(source, dict) or involved.get("kind") != "Pod":
            verdicts.ignored["nccl_malformed"] += 1
            continue
        namespace = str(_dict(event, "metadata").get("namespace") or "")
        name, host = str(involved.get("name") or ""), str(source.get("host") or "")
        if not name or not host:
            verdicts.ignored["nccl_malformed"] += 1
            continue
        if involved.get("namespace") != namespace:
            verdicts.ignored["nccl_other_namespace"] += 1  # a team may only speak for its own pods
            continue
        key = (namespace, name)
        if key not in pods:
            if len(pods) >= MAX_POD_LOOKUPS:
                verdicts.ignored["nccl_lookup_limit"] += 1
                continue
            pods[key] = _placement(lookup(namespace, name))
        placed = pods[key]
        if placed is None:
            verdicts.ignored["nccl_no_such_pod"] += 1
            continue
        uid = involved.get("uid")
        if uid and uid != placed[0]:
            verdicts.ignored["nccl_other_pod"] += 1  # a pod of the same name, not the one that reported
            continue
        if placed[1] != host:
            verdicts.ignored["nccl_wrong_node"] += 1
            continue
        if (host, namespace, name) not in seen:
            seen.add((host, namespace, name))
            verdicts.nccl[host, namespace] += 1
            verdicts.nccl_at[host, namespace] = max(at, verdicts.nccl_at.get((host, namespace), at))


def preflight_failures(pods: Iterable[dict[str, Any]], now: float, window_s: float, verdicts: Verdicts) -> None:
    """The latest failed preflight init container per node and namespace, from pod status (the node's kubelet)."""
    for pod in pods:
        spec, pod_status = _dict(pod, "spec"), _dict(pod, "status")
        node = str(spec.get("nodeName") or "")
        namespace = str(_dict(pod, "metadata").get("namespace") or "")
        statuses = pod_status.get("initContainerStatuses")
        for status in statuses if isinstance(statuses, list) else []:
            if not isinstance(status, dict) or status.get("name") != PREFLIGHT_CONTAINER:
                continue
            for state in (status.get("state"), status.get("lastState")):
                terminated = (state or {}).get("terminated") if isinstance(state, dict) else None
                if not isinstance(terminated, dict) or terminated.get("exitCode") in (0, None):
                    continue
                when = parse_time(str(terminated.get("finishedAt") or ""))
                if now - when > window_s:
                    continue
                report = _report(terminated.get("message"))
                if report is None or not node or not namespace:
                    verdicts.ignored["preflight_unreadable" if node else "preflight_unbound"] += 1
                    continue
                if when >= verdicts.preflight.get((node, namespace), (report, float("-inf")))[1]:
                    verdicts.preflight[node, namespace] = (report, when)


def _placement(pod: dict[str, Any] | None) -> tuple[Any, Any] | None:
    """A pod's uid and node: all nccl_failures keeps of it (a team's pod may be megabytes of annotations)."""
    return None if pod is None else (_dict(pod, "metadata").get("uid"), _dict(pod, "spec").get("nodeName"))


def _dict(value: Any, key: str) -> dict[str, Any]:
    """value[key] when both are objects, else empty: hostile shapes read as nothing."""
    found = value.get(key) if isinstance(value, dict) else None
    return found if isinstance(found, dict) else {}


def _report(message: Any) -> health.Report | None:
    """preflight's report from a termination message (the contract's decoder); None for anything else."""
    if not isinstance(message, str):
        return None
    try:
        return health.load_report(message, "termination message")
    except (Invalid, ValueError, RecursionError):
        return None
