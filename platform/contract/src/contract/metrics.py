"""Every metric a Meridian component exports: name, type, help and labels, written once.

The components build their Prometheus collectors from these (the client library writes the exposition);
the generated scrape configs, alert rules and dashboards may only query names found here or in the pinned
lists of the upstream exporters (tests cross-check every query). Names follow Prometheus' conventions
(https://prometheus.io/docs/practices/naming/): a unit suffix, ``_total`` on counters (the name as exposed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from contract import names

Kind = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True)
class Metric:
    name: str  # as exposed: counters end in _total, histograms add _bucket/_sum/_count
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()

    def series(self) -> tuple[str, ...]:
        """The series names a query may use."""
        if self.kind == "histogram":
            return tuple(f"{self.name}_{suffix}" for suffix in ("bucket", "sum", "count"))
        return (self.name,)


# The trainer, per replica group (rank 0 of the group serves them), while it runs.
RUN_LABELS = ("run", "region", "group")
GOODPUT_CATEGORIES = ("productive", "startup", "checkpoint", "failed", "replayed")
TRAINER = (
    Metric("meridian_trainer_step", "gauge", "Last committed step.", RUN_LABELS),
    Metric("meridian_trainer_loss", "gauge", "Mean training loss over the last logging window.", RUN_LABELS),
    Metric(
        "meridian_trainer_tokens_per_second", "gauge", "Tokens per second over the last logging window.", RUN_LABELS
    ),
    Metric(
        "meridian_trainer_mfu_ratio", "gauge", "Model FLOPs utilization over the last logging window (0-1).", RUN_LABELS
    ),
    Metric(
        "meridian_trainer_goodput_seconds_total",
        "counter",
        "Seconds of the group's life by category (productive, startup, checkpoint, failed, replayed).",
        (*RUN_LABELS, "category"),
    ),
    Metric("meridian_trainer_participants", "gauge", "Replica groups in the last committed step's quorum.", RUN_LABELS),
    Metric("meridian_trainer_heals_total", "counter", "Times this group healed from a live peer.", RUN_LABELS),
    Metric(
        "meridian_trainer_checkpoint_seconds",
        "histogram",
        "Time from a checkpoint's start until it was staged (training resumes) or durable (files and marker written).",
        (*RUN_LABELS, "state"),
    ),
    Metric(
        "meridian_trainer_last_commit_timestamp_seconds",
        "gauge",
        "Unix time of the last committed step: a run whose pods run but whose value stops moving is stuck.",
        RUN_LABELS,
    ),
)

# Warden: one process per cluster (the leader acts; every replica serves its metrics).
WARDEN = (
    Metric(names.WARDEN_TRANSITIONS, "counter", "Node state transitions.", ("from_phase", "to_phase")),
    Metric(names.WARDEN_COMMANDS, "counter", "Commands decided, and whether carried out.", ("verb", "carried_out")),
    Metric(names.WARDEN_API_ERRORS, "counter", "Failed Kubernetes or Compute Engine requests."),
    Metric(names.WARDEN_CONFLICTS, "counter", "Node patches refused with 409; retried next round."),
    Metric(names.WARDEN_NODE_ERRORS, "counter", "Nodes Warden could not read or act on.", ("stage",)),
    Metric(names.WARDEN_LEASE_LOST, "counter", "Rounds stopped because the Lease was no longer held."),
    Metric(names.WARDEN_TRIGGERED_ROUNDS, "counter", "Rounds started by a watch event, not the timer."),
    Metric(names.WARDEN_NODES, "gauge", "GPU nodes by pool and phase.", ("pool", "phase")),
    Metric(names.WARDEN_BREAKER_BLOCKED, "gauge", "Suspect nodes the circuit breaker keeps in service."),
    Metric(names.WARDEN_LEADER, "gauge", "1 while this replica leads."),
    Metric(names.WARDEN_ROUND_SECONDS, "gauge", "How long the last round took."),
    Metric(names.WARDEN_ROUNDS, "counter", "Rounds run."),
    Metric(names.WARDEN_SIGNALS_IGNORED, "counter", "Tenant reports ignored.", ("reason",)),
    Metric(
        names.WARDEN_DEEP_CHECKS,
        "counter",
        "Deep checks (burn-in and idle sweeps) finished, by pool, kind (burn_in, sweep) and verdict (pass, fail).",
        ("pool", "kind", "verdict"),
    ),
    Metric(names.WARDEN_SWEEPS_RUNNING, "gauge", "Idle-node sweep checks running now, by pool.", ("pool",)),
    # GKE's managed DCGM does not export DCGM_FI_DEV_XID_ERRORS, and its series carry no node pool: the per-pool
    # Xid rate alert reads Warden's count of the Xids its node agents report.
    Metric(
        names.WARDEN_XIDS, "counter", "GPU Xid errors the node agents reported, by pool and Xid code.", ("pool", "xid")
    ),
    # Tenants' reports (a failed preflight container, NCCLFailure Events) only ask Warden to verify a node.
    Metric(
        names.WARDEN_VERIFICATION_REQUESTS,
        "counter",
        "Tenants' requests to verify a node, by the namespace that asked and outcome (accepted, rate_limited).",
        ("namespace", "outcome"),
    ),
)

# preflight: a run's checks (the probation and job-start pods serve them until they exit; the Pushgateway is
# not used: a short-lived pod's result is also on the Node annotation and in Warden's transitions).
PREFLIGHT = (
    Metric(
        "meridian_preflight_checks_total",
        "counter",
        "Checks run, by check and verdict (pass, fail).",
        ("check", "verdict"),
    ),
    Metric("meridian_preflight_last_run_timestamp_seconds", "gauge", "Unix time preflight last finished.", ()),
)

ALL = TRAINER + WARDEN + PREFLIGHT


def by_name() -> dict[str, Metric]:
    return {m.name: m for m in ALL}
