"""One round of Warden over a cluster: signals in, decisions out, within the safety budget.

Pure: the adapters (Kubernetes, GCE) gather NodeViews and carry out the
commands. Nodes are decided one after another, and each quarantine or
remediation counts against the budget at once, so a correlated failure can
never take out more than the limits allow in a single round.

The share limit always leaves room for one node per pool: 5% of a pool under
20 nodes rounds down to none, and a small or scaled-down pool would otherwise
never be repaired. A pool with nothing out of service may always take one.

A round may decide only some nodes (`only`: those a watch event just
touched) and still count every node's phase, so the budget is the same one
a full round would use.

Deep checks (issue 21): idle sweeps running now (`sweeping`, per pool) count
as out of service, so sweeps and remediations together stay within the share
limit. Joining nodes on their burn-in (Record.burn_in) never served and do not
count against it; their checks are bounded by policy.burn_in_max_per_pool.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from warden.policy import Policy, Signal
from warden.state import Budget, Decision, Facts, Record, decide

OUT_OF_SERVICE = ("quarantined", "draining", "remediating", "probation", "held")


@dataclass(frozen=True)
class NodeView:
    name: str
    pool: str
    record: Record
    facts: Facts
    signals: tuple[Signal, ...]


@dataclass
class Round:
    decisions: dict[str, Decision]
    blocked: int  # suspects the circuit breaker kept in service
    blocked_pools: Counter[str] = field(default_factory=Counter)  # the same, by pool


def allowed_out(size: int, share: float) -> int:
    """How many nodes of `size` may be out of service at once: the share, rounded down, and never less than 1."""
    return max(1, math.floor(size * share + 1e-9))


def counts_out(record: Record) -> bool:
    """Whether a node counts against the share limit: out of service, and not a joining node's burn-in."""
    return record.phase in OUT_OF_SERVICE and not record.burn_in


def burning_in(view: NodeView) -> bool:
    """A joining node whose burn-in check runs (or was just started)."""
    return view.record.burn_in and view.record.phase == "probation" and not view.facts.check_missing


def run_round(
    nodes: list[NodeView],
    policy: Policy,
    now: float,
    only: Collection[str] | None = None,
    sweeping: Mapping[str, int] | None = None,
) -> Round:
    pool_size = Counter(n.pool for n in nodes)
    out = Counter(n.pool for n in nodes if counts_out(n.record))
    out.update(sweeping or {})
    burning = Counter(n.pool for n in nodes if burning_in(n))
    busy = Counter(n.pool for n in nodes if n.record.phase == "remediating")
    total_out, total_busy, cluster = sum(out.values()), sum(busy.values()), len(nodes)
    decisions: dict[str, Decision] = {}
    blocked, blocked_pools = 0, Counter[str]()
    # Nodes already on their way first, so finishing work frees budget before new work takes it.
    share = policy.unhealthy_share_limit
    pool_cap = {pool: allowed_out(size, share) for pool, size in pool_size.items()}
    cluster_cap = allowed_out(cluster, share)
    for node in sorted(nodes, key=lambda n: (n.record.phase == "healthy", n.record.since, n.name)):
        if only is not None and node.name not in only:
            continue  # counted above as it stands; not decided in this round
        within = out[node.pool] < pool_cap[node.pool] and total_out < cluster_cap
        budget = Budget(
            may_quarantine=out[node.pool] == 0 or within,
            may_remediate=busy[node.pool] < max(1, policy.max_per_pool) and total_busy < max(1, policy.max_per_cluster),
            may_burn_in=burning[node.pool] < policy.burn_in_max_per_pool,
        )
        decision = decide(node.record, list(node.signals), node.facts, now, policy, budget)
        before, after = node.record.phase, decision.record.phase
        was_out, is_out = counts_out(node.record), counts_out(decision.record)
        if is_out and not was_out:
            out[node.pool] += 1
            total_out += 1
        elif was_out and not is_out:
            out[node.pool] -= 1
            total_out -= 1
        if any(c.verb == "preflight" for c in decision.commands) and decision.record.burn_in:
            burning[node.pool] += 1
        if before != "remediating" and after == "remediating":
            busy[node.pool] += 1
            total_busy += 1
        elif before == "remediating" and after != "remediating":
            busy[node.pool] -= 1
            total_busy -= 1
        if after == "suspect" and not decision.commands:
            blocked += 1
            blocked_pools[node.pool] += 1
        if decision.commands or decision.record != node.record:
            decisions[node.name] = decision
    return Round(decisions, blocked, blocked_pools)
