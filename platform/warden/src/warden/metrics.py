"""Warden's Prometheus metrics: contract.metrics.WARDEN, built with the client library in a registry of its own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from contract import metrics, names
from preflight.exposition import Family, families, render
from warden.leader import Elector

# WardenMetrics attribute -> the catalog name it updates.
ATTRIBUTES = {
    "transitions": names.WARDEN_TRANSITIONS,
    "commands": names.WARDEN_COMMANDS,
    "api_errors": names.WARDEN_API_ERRORS,
    "conflicts": names.WARDEN_CONFLICTS,
    "node_errors": names.WARDEN_NODE_ERRORS,
    "lease_lost": names.WARDEN_LEASE_LOST,
    "triggered": names.WARDEN_TRIGGERED_ROUNDS,
    "nodes": names.WARDEN_NODES,
    "blocked": names.WARDEN_BREAKER_BLOCKED,
    "leader": names.WARDEN_LEADER,
    "round_seconds": names.WARDEN_ROUND_SECONDS,
    "rounds": names.WARDEN_ROUNDS,
    "ignored": names.WARDEN_SIGNALS_IGNORED,
    "deep_checks": names.WARDEN_DEEP_CHECKS,
    "sweeps_running": names.WARDEN_SWEEPS_RUNNING,
    "xids": names.WARDEN_XIDS,
    "verifications": names.WARDEN_VERIFICATION_REQUESTS,
}


class WardenMetrics:
    """One attribute per catalog entry (``metrics.nodes.set(3, pool=..., phase=...)``); ``render()`` for /metrics."""

    transitions: Family
    commands: Family
    api_errors: Family
    conflicts: Family
    node_errors: Family
    lease_lost: Family
    triggered: Family
    nodes: Family
    blocked: Family
    leader: Family
    round_seconds: Family
    rounds: Family
    ignored: Family
    deep_checks: Family
    sweeps_running: Family
    xids: Family
    verifications: Family

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        built = families(metrics.WARDEN, self.registry)
        for attribute, name in ATTRIBUTES.items():
            setattr(self, attribute, built[name])

    def render(self) -> str:
        return render(self.registry)


def track_leadership(metrics: WardenMetrics, elector: Elector) -> None:
    """`warden_leader` reads the elector's fenced holds() whenever it is scraped, 1 or 0, on every replica.

    Not set by the round loop: a replica stuck in a long round would keep reading 1 after its Lease lapsed,
    and the split-leadership alert would fire on a replica whose writes are already refused.
    """
    metrics.leader.collector.set_function(lambda: 1.0 if elector.holds() else 0.0)
