"""Every metric a Meridian component exports: name, type, help and labels, written once.

Each component's metrics are one frozen catalog (``TRAINER``, ``RL``, ``WARDEN``, ``PREFLIGHT``) whose attributes are
the metrics: code names a metric by attribute (``TRAINER.step``, ``WARDEN.leader.name``), so a metric's name is
spelled here and nowhere else in the code that ships (tests/contract/test_single_sources.py). A catalog is
iterable, in declaration order, for what walks all of them (the exposition check, the README tables, the
PromQL cross-check). The components build their Prometheus collectors from these through ``telemetry``
(the client library writes the exposition); the generated scrape configs, alert rules and dashboards may only
query names found here or in the pinned lists of the upstream exporters (tests cross-check every query).
Names follow Prometheus' conventions (https://prometheus.io/docs/practices/naming/): a unit suffix,
``_total`` on counters (the name as exposed).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Literal

Kind = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
class Catalog:
    """One component's metrics as attributes; iterating yields them in declaration order.

    A subclass declares each metric as a field whose default is its Metric: attribute and name on one line.
    """

    def items(self) -> Iterator[tuple[str, Metric]]:
        """(attribute, metric) pairs: the attribute is the short name (the trainer's W&B key, Warden's field)."""
        return ((f.name, getattr(self, f.name)) for f in fields(self))

    def __iter__(self) -> Iterator[Metric]:
        return (metric for _, metric in self.items())

    def __len__(self) -> int:
        return len(fields(self))


# The trainer, per replica group (rank 0 of the group serves them), while it runs.
RUN_LABELS = ("run", "region", "group")
GOODPUT_CATEGORIES = ("productive", "startup", "checkpoint", "failed", "replayed")


@dataclass(frozen=True, kw_only=True)
class Trainer(Catalog):
    step: Metric = Metric(name="meridian_trainer_step", kind="gauge", help="Last committed step.", labels=RUN_LABELS)
    loss: Metric = Metric(
        name="meridian_trainer_loss",
        kind="gauge",
        help="Mean training loss over the last logging window.",
        labels=RUN_LABELS,
    )
    tokens_per_second: Metric = Metric(
        name="meridian_trainer_tokens_per_second",
        kind="gauge",
        help="Tokens per second over the last logging window.",
        labels=RUN_LABELS,
    )
    mfu_ratio: Metric = Metric(
        name="meridian_trainer_mfu_ratio",
        kind="gauge",
        help="Model FLOPs utilization over the last logging window (0-1).",
        labels=RUN_LABELS,
    )
    goodput_seconds: Metric = Metric(
        name="meridian_trainer_goodput_seconds_total",
        kind="counter",
        help="Seconds of the group's life by category (productive, startup, checkpoint, failed, replayed).",
        labels=(*RUN_LABELS, "category"),
    )
    participants: Metric = Metric(
        name="meridian_trainer_participants",
        kind="gauge",
        help="Replica groups in the last committed step's quorum.",
        labels=RUN_LABELS,
    )
    heals: Metric = Metric(
        name="meridian_trainer_heals_total",
        kind="counter",
        help="Times this group healed from a live peer.",
        labels=RUN_LABELS,
    )
    checkpoint_seconds: Metric = Metric(
        name="meridian_trainer_checkpoint_seconds",
        kind="histogram",
        help="Time from a checkpoint's start until it was staged (training resumes) or durable (files and marker written).",
        labels=(*RUN_LABELS, "state"),
    )
    last_commit_timestamp_seconds: Metric = Metric(
        name="meridian_trainer_last_commit_timestamp_seconds",
        kind="gauge",
        help="Unix time of the last committed step: a run whose pods run but whose value stops moving is stuck.",
        labels=RUN_LABELS,
    )


# RL post-training (GRPO, trainer.rl): the run's policy and its generators, served beside TRAINER's by the process
# that commits the steps. Ages are in policy versions (one per committed step); `max_policy_age` bounds them.
GENERATOR_STATES = ("generating", "syncing", "waiting")
# Why the controller refused a generator's answer (trainer.rl.wire.Refused): not a lease it holds, groups or
# completions not as leased, a length, token, logprob or version no engine of the run produces.
REFUSAL_REASONS = ("lease", "shape", "length", "token", "logprob", "version")


@dataclass(frozen=True, kw_only=True)
class Reinforcement(Catalog):
    reward_mean: Metric = Metric(
        name="meridian_rl_reward_mean",
        kind="gauge",
        help="Mean sampled reward of the rollouts behind the last trained batch (kept when the batch was all surplus).",
        labels=RUN_LABELS,
    )
    greedy_accuracy: Metric = Metric(
        name="meridian_rl_greedy_accuracy_ratio",
        kind="gauge",
        help="Held-out greedy accuracy at the last evaluation (0-1).",
        labels=RUN_LABELS,
    )
    policy_version: Metric = Metric(
        name="meridian_rl_policy_version",
        kind="gauge",
        help="Policy version after the last committed step (one per step).",
        labels=RUN_LABELS,
    )
    sample_age: Metric = Metric(
        name="meridian_rl_sample_age_versions",
        kind="histogram",
        help="Age of each trained group: the training version minus its oldest completion's version.",
        labels=RUN_LABELS,
    )
    stale_trained: Metric = Metric(
        name="meridian_rl_stale_groups_trained_total",
        kind="counter",
        help="Groups trained although older than max_policy_age: the bound says it stays 0.",
        labels=RUN_LABELS,
    )
    reissued: Metric = Metric(
        name="meridian_rl_prompts_reissued_total",
        kind="counter",
        help="Prompts issued again: a generator died, a lease expired, a group went stale, or the run resumed.",
        labels=RUN_LABELS,
    )
    generated_tokens: Metric = Metric(
        name="meridian_rl_generated_tokens_total",
        kind="counter",
        help="Response tokens the generators sampled.",
        labels=RUN_LABELS,
    )
    trained_tokens: Metric = Metric(
        name="meridian_rl_trained_tokens_total",
        kind="counter",
        help="Response tokens in committed training steps.",
        labels=RUN_LABELS,
    )
    clip_fraction: Metric = Metric(
        name="meridian_rl_clip_fraction_ratio",
        kind="gauge",
        help="Share of the last step's response tokens (all groups) where PPO's clip took the gradient away (0-1).",
        labels=RUN_LABELS,
    )
    importance_ratio_mean: Metric = Metric(
        name="meridian_rl_importance_ratio_mean",
        kind="gauge",
        help="Mean importance ratio exp(logp_trainer - logp_sampler) over the last step's response tokens.",
        labels=RUN_LABELS,
    )
    importance_ratio_max: Metric = Metric(
        name="meridian_rl_importance_ratio_max",
        kind="gauge",
        help="Largest importance ratio of a response token in the last step.",
        labels=RUN_LABELS,
    )
    entropy: Metric = Metric(
        name="meridian_rl_entropy_nats",
        kind="gauge",
        help="Mean entropy of the policy's (masked, tempered) next-token distribution over the last step's response tokens.",
        labels=RUN_LABELS,
    )
    kl_sampler: Metric = Metric(
        name="meridian_rl_kl_sampler_nats",
        kind="gauge",
        help="k3 estimate of KL(sampler || trainer) per response token of the last step: what staleness costs.",
        labels=RUN_LABELS,
    )
    kl_reference: Metric = Metric(
        name="meridian_rl_kl_reference_nats",
        kind="gauge",
        help="The loss's k3 KL against the reference model per response token of the last step (kl_beta > 0 only).",
        labels=RUN_LABELS,
    )
    response_tokens_mean: Metric = Metric(
        name="meridian_rl_response_tokens_mean",
        kind="gauge",
        help="Mean response length in tokens of the last step's batch.",
        labels=RUN_LABELS,
    )
    response_tokens_max: Metric = Metric(
        name="meridian_rl_response_tokens_max",
        kind="gauge",
        help="Longest response in tokens of the last step's batch.",
        labels=RUN_LABELS,
    )
    truncated: Metric = Metric(
        name="meridian_rl_truncated_ratio",
        kind="gauge",
        help="Share of the last step's completions that ran to max_tokens without ending (0-1).",
        labels=RUN_LABELS,
    )
    weight_sync_seconds: Metric = Metric(
        name="meridian_rl_weight_sync_seconds",
        kind="histogram",
        help="Time to send one policy version's weights to the generators.",
        labels=RUN_LABELS,
    )
    generator_seconds: Metric = Metric(
        name="meridian_rl_generator_seconds_total",
        kind="counter",
        help="Seconds of each generator's life by state (generating, syncing, waiting).",
        labels=(*RUN_LABELS, "generator", "state"),
    )
    refused_answers: Metric = Metric(
        name="meridian_rl_refused_answers_total",
        kind="counter",
        help="Generator answers the controller refused, by generator and reason (lease, shape, length, token, "
        "logprob, version); their prompts are issued again.",
        labels=(*RUN_LABELS, "generator", "reason"),
    )


# Warden: one process per cluster (the leader acts; every replica serves its metrics).
@dataclass(frozen=True, kw_only=True)
class Warden(Catalog):
    transitions: Metric = Metric(
        name="warden_transitions_total",
        kind="counter",
        help="Node state transitions.",
        labels=("from_phase", "to_phase"),
    )
    commands: Metric = Metric(
        name="warden_commands_total",
        kind="counter",
        help="Commands decided, and whether carried out.",
        labels=("verb", "carried_out"),
    )
    api_errors: Metric = Metric(
        name="warden_api_errors_total", kind="counter", help="Failed Kubernetes or Compute Engine requests."
    )
    conflicts: Metric = Metric(
        name="warden_conflicts_total", kind="counter", help="Node patches refused with 409; retried next round."
    )
    node_errors: Metric = Metric(
        name="warden_node_errors_total",
        kind="counter",
        help="Nodes Warden could not read or act on.",
        labels=("stage",),
    )
    lease_lost: Metric = Metric(
        name="warden_lease_lost_total", kind="counter", help="Rounds stopped because the Lease was no longer held."
    )
    triggered: Metric = Metric(
        name="warden_triggered_rounds_total", kind="counter", help="Rounds started by a watch event, not the timer."
    )
    nodes: Metric = Metric(
        name="warden_nodes", kind="gauge", help="GPU nodes by pool and phase.", labels=("pool", "phase")
    )
    blocked: Metric = Metric(
        name="warden_breaker_blocked_nodes", kind="gauge", help="Suspect nodes the circuit breaker keeps in service."
    )
    leader: Metric = Metric(name="warden_leader", kind="gauge", help="1 while this replica leads.")
    round_seconds: Metric = Metric(name="warden_round_seconds", kind="gauge", help="How long the last round took.")
    rounds: Metric = Metric(name="warden_rounds_total", kind="counter", help="Rounds run.")
    ignored: Metric = Metric(
        name="warden_signals_ignored_total", kind="counter", help="Tenant reports ignored.", labels=("reason",)
    )
    deep_checks: Metric = Metric(
        name="warden_deep_checks_total",
        kind="counter",
        help="Deep checks (burn-in and idle sweeps) finished, by pool, kind (burn_in, sweep) and verdict (pass, fail).",
        labels=("pool", "kind", "verdict"),
    )
    sweeps_running: Metric = Metric(
        name="warden_sweeps_running",
        kind="gauge",
        help="Idle-node sweep checks running now, by pool.",
        labels=("pool",),
    )
    # GKE's managed DCGM does not export DCGM_FI_DEV_XID_ERRORS, and its series carry no node pool: the per-pool
    # Xid rate alert reads Warden's count of the Xids its node agents report.
    xids: Metric = Metric(
        name="warden_xids_total",
        kind="counter",
        help="GPU Xid errors the node agents reported, by pool and Xid code.",
        labels=("pool", "xid"),
    )
    # Tenants' reports (a failed preflight container, NCCLFailure Events) only ask Warden to verify a node.
    verifications: Metric = Metric(
        name="warden_verification_requests_total",
        kind="counter",
        help="Tenants' requests to verify a node, by the namespace that asked and outcome (accepted, rate_limited).",
        labels=("namespace", "outcome"),
    )


# preflight: a run's checks (the probation and job-start pods serve them until they exit; the Pushgateway is
# not used: a short-lived pod's result is also on the Node annotation and in Warden's transitions).
@dataclass(frozen=True, kw_only=True)
class Preflight(Catalog):
    checks: Metric = Metric(
        name="meridian_preflight_checks_total",
        kind="counter",
        help="Checks run, by check and verdict (pass, fail).",
        labels=("check", "verdict"),
    )
    last_run: Metric = Metric(
        name="meridian_preflight_last_run_timestamp_seconds", kind="gauge", help="Unix time preflight last finished."
    )


TRAINER = Trainer()
RL = Reinforcement()
WARDEN = Warden()
PREFLIGHT = Preflight()
CATALOGS: tuple[Catalog, ...] = (TRAINER, RL, WARDEN, PREFLIGHT)
ALL: tuple[Metric, ...] = tuple(m for catalog in CATALOGS for m in catalog)
