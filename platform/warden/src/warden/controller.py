"""One round of Warden over a cluster: signals in, decisions out, within the safety budget.

Pure: the adapters (Kubernetes, GCE) gather NodeViews and carry out the
commands. Nodes are decided one after another, and each quarantine or
remediation counts against the budget at once, so a correlated failure can
never take out more than the limits allow in a single round.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

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


def run_round(nodes: list[NodeView], policy: Policy, now: float) -> Round:
    pool_size = Counter(n.pool for n in nodes)
    out = Counter(n.pool for n in nodes if n.record.phase in OUT_OF_SERVICE)
    busy = Counter(n.pool for n in nodes if n.record.phase == "remediating")
    total_out, total_busy, cluster = sum(out.values()), sum(busy.values()), len(nodes)
    decisions: dict[str, Decision] = {}
    blocked = 0
    # Nodes already on their way first, so finishing work frees budget before new work takes it.
    for node in sorted(nodes, key=lambda n: (n.record.phase == "healthy", n.record.since, n.name)):
        budget = Budget(
            may_quarantine=(out[node.pool] + 1) / pool_size[node.pool] <= policy.unhealthy_share_limit
            and (total_out + 1) / cluster <= policy.unhealthy_share_limit,
            may_remediate=busy[node.pool] < policy.max_per_pool and total_busy < policy.max_per_cluster,
        )
        decision = decide(node.record, list(node.signals), node.facts, now, policy, budget)
        before, after = node.record.phase, decision.record.phase
        if before not in OUT_OF_SERVICE and after in OUT_OF_SERVICE:
            out[node.pool] += 1
            total_out += 1
        elif before in OUT_OF_SERVICE and after not in OUT_OF_SERVICE:
            out[node.pool] -= 1
            total_out -= 1
        if before != "remediating" and after == "remediating":
            busy[node.pool] += 1
            total_busy += 1
        elif before == "remediating" and after != "remediating":
            busy[node.pool] -= 1
            total_busy -= 1
        if after == "suspect" and not decision.commands:
            blocked += 1
        if decision.commands or decision.record != node.record:
            decisions[node.name] = decision
    return Round(decisions, blocked)
