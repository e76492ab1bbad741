"""Warden's Prometheus metrics: contract.metrics.WARDEN, built with the client library in a registry of its own."""

from __future__ import annotations

from contract.metrics import WARDEN
from telemetry.exposition import render
from telemetry.families import Family, families, registry
from warden.leader import Elector


class WardenMetrics:
    """One attribute per catalog entry, named as in the catalog (``metrics.nodes.set(3, pool=..., phase=...)``).

    ``render()`` for /metrics. The annotations are for the type checker; the attributes come from WARDEN.
    """

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
        self.registry = registry()
        built = families(WARDEN, self.registry)
        for attribute, metric in WARDEN.items():
            setattr(self, attribute, built[metric])

    def render(self) -> str:
        return render(self.registry)


def track_leadership(metrics: WardenMetrics, elector: Elector) -> None:
    """`warden_leader` reads the elector's fenced holds() whenever it is scraped, 1 or 0, on every replica.

    Not set by the round loop: a replica stuck in a long round would keep reading 1 after its Lease lapsed,
    and the split-leadership alert would fire on a replica whose writes are already refused.
    """
    metrics.leader.collector.set_function(lambda: 1.0 if elector.holds() else 0.0)
