"""Idle-node sweeps: which nodes get a deep check now, which sweeps to give up (pure).

A node is due when it is in service (healthy, schedulable, not opted out),
no job's pod has used its GPUs for policy.sweep_idle_s, and its last deep
check (the Node annotation names.DEEP_CHECK_ANNOTATION; missing or unreadable
means never) is policy.sweep_every_s old. Sweeps run as the lowest-priority
Kueue workloads, so any job preempts them; they never preempt a job.

Budget: a running sweep counts as out of service. Per pool, sweeps start only
while the pool's out-of-service nodes (remediations and sweeps together) stay
within controller.allowed_out, and the cluster's within its cap, and at most
policy.sweep_max_per_pool at once. A pool where the circuit breaker kept a
suspect in service gives up sweeps instead of starting any, so a real fault
never waits for a check.

A sweep that is not running while a job uses its node was preempted (or
never admitted before a job took the node): it is given up and the node is
due again later, not failed. One still waiting for admission after
ADMIT_WAIT_S is given up too. A finished sweep is recorded (pass or fail) and
its Job deleted; a failure is a signal to the policy like any other
(observe.deep_check_signal).

Verification Jobs (warden.verify, kind "verify") are listed with the sweeps:
they are recorded when they finish like a sweep, no sweep starts on their
node, but they hold none of the repair budget (they have their own) and a
job using their node does not end them: they wait for it, up to verify.WAIT_S.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from warden import verify
from warden.controller import allowed_out
from warden.policy import Policy

ADMIT_WAIT_S = 1800.0  # a sweep not admitted by Kueue in this long is given up (the node is asked again later)

SweepState = Literal["waiting", "running", "pass", "fail"]
JobKind = Literal["sweep", "verify"]


@dataclass(frozen=True)
class SweepJob:
    node: str
    pool: str
    state: SweepState  # waiting: created, not yet running (Kueue has not admitted it, or its pod is pending)
    created: float
    name: str = ""
    kind: JobKind = "sweep"


@dataclass(frozen=True)
class Candidate:
    name: str
    pool: str
    in_service: bool  # healthy, schedulable, not opted out
    idle_since: float | None  # since when no job's pod uses its GPUs; None while one does, or unknown
    last_check: float | None  # the last deep check's time; None: never (or unreadable)


@dataclass
class SweepPlan:
    start: list[str] = field(default_factory=list)  # nodes to sweep now
    give_up: list[SweepJob] = field(default_factory=list)  # delete, not a failure: the node is due again later
    finished: list[SweepJob] = field(default_factory=list)  # record the verdict, then delete
    running: Counter[str] = field(default_factory=Counter)  # sweeps holding budget after this plan, by pool
    verifying: set[str] = field(default_factory=set)  # nodes a verification check waits for or runs on


def due(node: Candidate, now: float, policy: Policy) -> bool:
    if not node.in_service or node.idle_since is None or now - node.idle_since < policy.sweep_idle_s:
        return False
    return node.last_check is None or now - node.last_check >= policy.sweep_every_s


def plan(
    nodes: Iterable[Candidate],
    jobs: Iterable[SweepJob],
    out: Mapping[str, int],
    blocked: Mapping[str, int],
    policy: Policy,
    now: float,
) -> SweepPlan:
    """What to do this round. `out`: nodes out of service per pool, sweeps excluded (controller.counts_out);
    `blocked`: suspects the circuit breaker kept in service this round, per pool."""
    nodes = list(nodes)
    by_name = {n.name: n for n in nodes}
    result = SweepPlan()
    active: list[SweepJob] = []
    for job in jobs:
        node = by_name.get(job.node)
        if job.state in ("pass", "fail"):
            result.finished.append(job)
        elif job.kind == "verify":
            if job.state == "waiting" and (node is None or 0 < job.created <= now - verify.WAIT_S):
                result.give_up.append(job)
            else:
                result.verifying.add(job.node)
        elif job.state == "waiting" and (
            node is None or node.idle_since is None or 0 < job.created <= now - ADMIT_WAIT_S
        ):
            result.give_up.append(job)  # a job has the node (Kueue preempted the sweep), or it never started
        else:
            active.append(job)
    # A suspect waits for budget: give up sweeps in its pool, newest first, one per blocked suspect.
    for pool, count in blocked.items():
        mine = sorted((j for j in active if j.pool == pool), key=lambda j: -j.created)[:count]
        result.give_up += mine
        active = [j for j in active if j not in mine]
    running = Counter(j.pool for j in active)
    checking = {j.node for j in active} | {j.node for j in result.give_up} | {j.node for j in result.finished}
    checking |= result.verifying
    sizes = Counter(n.pool for n in nodes)
    share = policy.unhealthy_share_limit
    cluster_free = allowed_out(len(nodes), share) - sum(out.values()) - sum(running.values())
    never = -1.0  # never checked sorts first
    candidates = sorted(
        (n for n in nodes if n.name not in checking and due(n, now, policy)),
        key=lambda n: (n.last_check if n.last_check is not None else never, n.name),
    )
    for node in candidates:
        pool = node.pool
        if blocked.get(pool) or cluster_free <= 0 or running[pool] >= policy.sweep_max_per_pool:
            continue
        if out.get(pool, 0) + running[pool] >= allowed_out(sizes[pool], share):
            continue
        result.start.append(node.name)
        running[pool] += 1
        cluster_free -= 1
    result.running = running
    return result
