"""Prometheus metrics in the text exposition format (counters and gauges with labels); names from contract.names."""

from __future__ import annotations

import threading
from collections import defaultdict

from contract import names

LabelKey = tuple[tuple[str, str], ...]


class Metric:
    def __init__(self, name: str, kind: str, help_text: str) -> None:
        self.name, self.kind, self.help = name, kind, help_text
        self.values: dict[LabelKey, float] = defaultdict(float)

    def inc(self, amount: float = 1, **labels: str) -> None:
        self.values[tuple(sorted(labels.items()))] += amount

    def set(self, value: float, **labels: str) -> None:
        self.values[tuple(sorted(labels.items()))] = value

    def get(self, **labels: str) -> float:
        return self.values.get(tuple(sorted(labels.items())), 0.0)


class Registry:
    def __init__(self) -> None:
        self.metrics: dict[str, Metric] = {}
        self.lock = threading.Lock()

    def counter(self, name: str, help_text: str) -> Metric:
        return self.metrics.setdefault(name, Metric(name, "counter", help_text))

    def gauge(self, name: str, help_text: str) -> Metric:
        return self.metrics.setdefault(name, Metric(name, "gauge", help_text))

    def render(self) -> str:
        lines = []
        with self.lock:
            for m in self.metrics.values():
                lines += [f"# HELP {m.name} {m.help}", f"# TYPE {m.name} {m.kind}"]
                for key, value in sorted(m.values.items()):
                    labels = ",".join(f'{k}="{_escape(v)}"' for k, v in key)
                    lines.append(f"{m.name}{{{labels}}} {value:g}" if labels else f"{m.name} {value:g}")
        return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class WardenMetrics:
    def __init__(self) -> None:
        self.registry = r = Registry()
        self.transitions = r.counter(names.WARDEN_TRANSITIONS, "Node state transitions, by from_phase and to_phase.")
        self.commands = r.counter(names.WARDEN_COMMANDS, "Commands decided, by verb and whether carried out.")
        self.api_errors = r.counter(
            names.WARDEN_API_ERRORS,
            "Failed Kubernetes or Compute Engine requests (timeouts and dropped connections too).",
        )
        self.conflicts = r.counter(
            names.WARDEN_CONFLICTS,
            "Node patches refused with 409 because someone changed the Node; retried next round.",
        )
        self.node_errors = r.counter(
            names.WARDEN_NODE_ERRORS,
            "Nodes Warden could not read or act on (stage=record|observe|act); such a node is held or left alone.",
        )
        self.lease_lost = r.counter(names.WARDEN_LEASE_LOST, "Rounds stopped because the Lease was no longer held.")
        self.triggered = r.counter(names.WARDEN_TRIGGERED_ROUNDS, "Rounds started by a watch event, not the timer.")
        self.nodes = r.gauge(names.WARDEN_NODES, "GPU nodes by phase.")
        self.blocked = r.gauge(names.WARDEN_BREAKER_BLOCKED, "Suspect nodes the circuit breaker keeps in service.")
        self.leader = r.gauge(names.WARDEN_LEADER, "1 while this replica leads.")
        self.round_seconds = r.gauge(names.WARDEN_ROUND_SECONDS, "How long the last round took.")
        self.rounds = r.counter(names.WARDEN_ROUNDS, "Rounds run.")
        self.ignored = r.counter(
            names.WARDEN_SIGNALS_IGNORED, "Tenant reports (NCCL Events, preflight messages) ignored, by reason."
        )
        self.deep_checks = r.counter(
            names.WARDEN_DEEP_CHECKS, "Deep checks (burn-in and idle sweeps) finished, by pool, kind and verdict."
        )
        self.sweeps_running = r.gauge(names.WARDEN_SWEEPS_RUNNING, "Idle-node sweep checks running now, by pool.")
