"""Tenants' requests to verify a node: rate-limited per namespace, answered by Warden's own deep check.

What a tenant's pod can write (its preflight container's termination message, NCCLFailure Events as
its team's service account) is a request, never a verdict (DESIGN, "Trust boundaries"): a pod can be
pinned to another team's node and report anything. warden.trust turns what the cluster attests into
Requests; here each new one takes a token from its namespace's bucket (counted in
warden_verification_requests_total{namespace,outcome}), an accepted one waits for a slot, and
Warden answers it with its own check: a `verify` deep check Job (warden.deepcheck, the idle sweep's
Job: Warden's image and command, in Warden's namespace, placed by the scheduler at the sweep's
lowest priority, so it never preempts a job). Only that check's failure, recorded on the Node like
any deep check, is a signal to the policy (observe.deep_check_signal).

The node stays in service meanwhile: no cordon, no eviction. A cordon "to be safe" would hand every
team a way to take other teams' nodes out of service; a node that really is faulty fails the job
that reported it, and the check runs as soon as the node's GPUs are free.

Budgets: verification checks have their own cap (MAX_RUNNING in the cluster) and never count
against the repair budget (the circuit breaker's share, which idle sweeps do count against), so
tenants cannot use it up and a real fault never waits for them. Slots go round the namespaces, so
one team's flood does not delay another team's request.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from warden.ratelimit import TokenBucket

BURST = 3  # requests a namespace may make at once
EVERY_S = 600.0  # and one more every this many seconds
MAX_RUNNING = 2  # verification checks at once in the cluster: their own budget, not the repair budget
WAIT_S = 6 * 3600.0  # a check not started in this long (its node stayed busy) is given up; a new report asks again
MAX_SEEN = 100_000  # reports remembered as decided; beyond, new ones are refused until old ones leave the window

RequestKind = Literal["preflight", "nccl"]
Outcome = Literal["accepted", "rate_limited"]


@dataclass(frozen=True)
class Request:
    node: str
    namespace: str  # who asked: the reporting pod's namespace
    kind: RequestKind
    at: float  # when the report was made (the newest, for NCCL failures)
    detail: str = ""


class Verifier:
    """Per-namespace token buckets, the reports already decided, and accepted requests waiting for a check."""

    def __init__(self, clock: Callable[[], float], burst: int = BURST, every_s: float = EVERY_S) -> None:
        self.clock, self.burst, self.every_s = clock, burst, every_s
        self.buckets: dict[str, TokenBucket] = {}
        self.seen: set[Request] = set()
        self.pending: dict[str, Request] = {}  # node -> the first accepted request not yet answered

    def admit(self, requests: Iterable[Request], now: float, window_s: float) -> list[tuple[Request, Outcome]]:
        """Each report once, when it first shows: accepted with a token of its namespace's bucket, or refused."""
        self.seen = {r for r in self.seen if now - r.at <= window_s}  # gone from the window: reads as old news
        decided: list[tuple[Request, Outcome]] = []
        for request in requests:
            if request in self.seen:
                continue
            if len(self.seen) >= MAX_SEEN:
                decided.append((request, "rate_limited"))
                continue
            self.seen.add(request)
            bucket = self.buckets.get(request.namespace)
            if bucket is None:  # namespaces are made by the platform, not tenants: as many buckets as teams
                bucket = TokenBucket(1 / self.every_s, self.burst, clock=self.clock)
                self.buckets[request.namespace] = bucket
            if bucket.try_take():
                self.pending.setdefault(request.node, request)
                decided.append((request, "accepted"))
            else:
                decided.append((request, "rate_limited"))
        return decided


def plan(
    pending: Mapping[str, Request],
    in_service: Callable[[str], bool],
    last_check: Mapping[str, float | None],
    checking: set[str],
    running: int,
) -> tuple[list[Request], list[str]]:
    """Which accepted requests get a check now (forgotten once it exists), and which nodes are done with. Pure.

    Done with: the node is gone or out of service (Warden already acts on it, or a person does), a deep
    check of it finished after the report (answered), or a check of it runs now (it will answer).
    The rest start within MAX_RUNNING - running, oldest first, one namespace after another.
    """
    done, waiting = [], []
    for node, request in pending.items():
        checked = last_check.get(node)
        if node not in last_check or not in_service(node) or node in checking or (checked or -1.0) >= request.at:
            done.append(node)
        else:
            waiting.append(request)
    by_namespace: dict[str, list[Request]] = defaultdict(list)
    for request in sorted(waiting, key=lambda r: (r.at, r.node)):
        by_namespace[request.namespace].append(request)
    order: list[Request] = []
    while any(by_namespace.values()):
        for namespace in sorted(by_namespace):
            if by_namespace[namespace]:
                order.append(by_namespace[namespace].pop(0))
    return order[: max(0, MAX_RUNNING - running)], done
