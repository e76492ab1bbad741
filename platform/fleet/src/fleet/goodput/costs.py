"""What each interruption and each checkpoint costs, in seconds: every figure with where it comes from.

Measured figures are the trainer's (platform/trainer/README.md, "Measured"),
on CPU with small models: they are floors, scaled by the size of the state
where the cost is a copy. Times nobody here measured are assumptions, named
as such; `meridian goodput --json` prints them all, and the README shows how
the result moves with the ones that matter.
"""

from __future__ import annotations

from dataclasses import dataclass

from contract.warden import HOST_REPORT_S, Config
from fleet.goodput.failures import Cause

GIB = 1024**3

# The shipped path's group recovery (issue 28: gkr -> RayJob -> the trainer's per-group supervisor).
# Measured by scripts/bench_trainer.py --only ray_recover (CPU), 2026-12-01, medians of 5 on a local 4-node
# Ray cluster (tiny model, 2 groups, 1 spare, restart delay 2 s): a worker SIGKILLed -> the replacement group's
# first commit after healing 4.23 s (a whole Ray node killed: 4.31 s; no spare: 3.67 s, the dead worker's room
# being free); death -> replacement actors running 0.19 s with a spare (2.62 s without). Assumption for GPU:
# the same control path (Ray actor restart, torchft quorum, heal handshake), plus GPU_GROUP_INIT_S and the
# state's transfer below; a real node loss adds Ray's node-death detection (up to ~65 s: Costs.ray_node_death_s).
RESTART_TO_HEAL_S = 4.23  # a group's worker death to the replacement group's first commit after healing
ACTOR_RESTART_S = 0.19  # a group's worker death to its replacement actors running, with a spare (part of the above)


@dataclass(frozen=True)
class Costs:
    # The job: the trainer's largest configuration, one replica group per node (FSDP2 over its 8 GPUs).
    parameters: float = 70.55e9  # trainer README, models table: `model=70b`
    state_bytes_per_parameter: float = 12.0  # fp32 weights + AdamW's two moments (trainer README: "stay fp32")
    # Checkpoints (scripts/bench_trainer.py): 1 GiB staged in 0.118 s (the training thread is blocked while
    # the state is copied), plus 0.6 s fixed per checkpoint on a sharded rank; durable 2.63 s after the call.
    staged_s_per_gib: float = 0.118
    blocked_fixed_s: float = 0.6
    durable_s_per_gib: float = 2.63
    # Recovery. detect: survivors stall for torchft's heartbeat timeout (bench: stalled 2.06 s with a 2 s
    # timeout; configs/config.yaml ships heartbeat_timeout_ms 5000).
    detect_s: float = 5.0
    group_restart_s: float = 120.0  # ASSUMED: a group's pods on a ready node, imports, NCCL (9.0 s on CPU)
    heal_bytes_per_s: float = 1.25e9  # ASSUMED: a rank fetches its shards from a live peer at 10 Gb/s
    job_restart_s: float = 600.0  # ASSUMED: every Ray worker replaced, NCCL at thousands of ranks, DCP load
    # The shipped path: a replacement group starts as Ray actors on a spare worker whose pod already runs.
    restart_to_heal_s: float = RESTART_TO_HEAL_S  # measured on CPU (above), tiny model
    actor_restart_s: float = ACTOR_RESTART_S  # measured on CPU (above), included in restart_to_heal_s
    gpu_group_init_s: float = 60.0  # ASSUMED: CUDA contexts, the group's NCCL communicators, the model on GPU
    # Node repair, after Warden's drain (its config's drain_grace_s, the fleet's setting).
    reboot_s: float = 300.0  # ASSUMED, as Warden's simulation (warden/simulate.py reboot_s)
    replace_s: float = 600.0  # ASSUMED, as Warden's simulation (twice a reboot)
    probation_s: float = 300.0  # ASSUMED: `preflight run` on the repaired node
    review_s: float = 4 * 3600.0  # ASSUMED: a person looks at a held node, then it is replaced
    gke_autorepair_s: float = 600.0  # GKE docs, node auto-repair: NotReady for about 10 minutes
    # Warden reports the host as faulty and waits for the report's operation before it recreates the VM
    # (recreating while it runs ends it in INTERNAL_ERROR): Google's "10 - 12 minutes", Warden's own figure
    # (contract.warden.HOST_REPORT_S), so the model and the service cannot disagree.
    faulty_report_wait_s: float = HOST_REPORT_S
    # A node lost under a running RayJob (issue 38; fleet.goodput.nodeloss has every stage and its source).
    # Ray: the GCS marks a node dead after health_check_failure_threshold (5) failed checks, each waiting out
    # health_check_timeout_ms (10 s) when the host no longer answers, health_check_period_ms (3 s) apart. The
    # three defaults as the pinned Ray (fleet.controllers.versions.READ_AT) reports them, ray._raylet.Config
    # (tests/fleet/test_goodput_nodeloss.py reads them from the installed build); the schedule as
    # fleet.controllers.sources.BEHAVIOURS["ray-node-death"] cites it.
    ray_health_check_period_s: float = 3.0
    ray_health_check_timeout_s: float = 10.0
    ray_health_check_failures: int = 5
    # Kubernetes: Ready goes Unknown after --node-monitor-grace-period, 50 s by default (kubernetes.io,
    # "Node Status", Conditions); the node.kubernetes.io/unreachable:NoExecute taint then evicts a pod after
    # its tolerationSeconds, 300 s from the DefaultTolerationSeconds admission plugin (kubernetes.io,
    # "Taints and Tolerations", Taint based evictions; gkr's pods set no toleration of their own for it).
    node_monitor_grace_s: float = 50.0
    toleration_s: float = 300.0
    pod_start_s: float = 60.0  # ASSUMED: KubeRay's replacement worker pod on the recreated node, image pre-pulled
    ray_join_s: float = 10.0  # ASSUMED: its raylet registers with the GCS; the worker is a spare again

    @property
    def state_gib_per_gpu(self) -> float:
        return self.parameters * self.state_bytes_per_parameter / 8 / GIB

    @property
    def blocked_s(self) -> float:
        """Training time lost per checkpoint: the copy of a rank's shards into the stager, and the fixed part."""
        return self.blocked_fixed_s + self.staged_s_per_gib * self.state_gib_per_gpu

    @property
    def durable_lag_s(self) -> float:
        """From the checkpoint's start until it can be resumed from."""
        return self.durable_s_per_gib * self.state_gib_per_gpu

    @property
    def transfer_s(self) -> float:
        """A rank's shards fetched from a live peer."""
        return self.state_gib_per_gpu * GIB / self.heal_bytes_per_s

    @property
    def heal_s(self) -> float:
        """A restarted group back in the quorum: its pods, then its shards from a peer."""
        return self.group_restart_s + self.transfer_s

    @property
    def ray_node_death_s(self) -> float:
        """A vanished host until Ray marks it dead, at most: every failed check waits out its timeout."""
        return self.ray_health_check_failures * (self.ray_health_check_timeout_s + self.ray_health_check_period_s)

    @property
    def pod_eviction_s(self) -> float:
        """A vanished host until the taint eviction deletes its pod (which then stays Terminating)."""
        return self.node_monitor_grace_s + self.toleration_s

    @property
    def rejoin_s(self) -> float:
        """A repaired node until its new Ray worker pod runs and has joined the cluster."""
        return self.pod_start_s + self.ray_join_s

    @property
    def supervised_heal_s(self) -> float:
        """The shipped path: the supervisor's replacement group (no new pod) back in the quorum."""
        return self.restart_to_heal_s + self.gpu_group_init_s + self.transfer_s


def warden_action(cause: Cause, config: Config) -> str | None:
    """What Warden carries out on the node of `cause`: reboot, replace or review (a person decides, then the
    node is replaced); None when the node stays in service or is left to GKE (NotReady)."""
    if cause.signal is None or cause.signal == "not_ready":
        return None  # the job's own crash (its pods restart on the same node), or GKE's auto-repair
    action = config.action_for(cause.signal, cause.code)
    if action in ("none", "restart_pods"):
        return None
    if config.dry_run or (config.act_on == "unambiguous" and not config.unambiguous(cause.signal, cause.code)):
        return "review"  # Warden only logs it: a person reads the log, then the node is replaced
    return action


def repair_s(cause: Cause, config: Config, costs: Costs) -> float:
    """How long the node of `cause` is out of service under Warden's policy (0: it stays in service)."""
    if cause.signal == "not_ready":
        return costs.gke_autorepair_s + costs.replace_s  # Warden leaves NotReady nodes to GKE's auto-repair
    action = warden_action(cause, config)
    if action is None:
        return 0.0
    replace = costs.faulty_report_wait_s + costs.replace_s
    fix = {"reboot": costs.reboot_s, "replace": replace, "review": costs.review_s + costs.replace_s}[action]
    return config.drain_grace_s + fix + costs.probation_s


def slots(config: Config, pool_nodes: int) -> int:
    """Nodes of one pool Warden repairs at once: its remediation caps and its circuit breaker.

    The breaker's budget is Warden's `controller.allowed_out` (max(1, floor(share x pool))), restated
    here because fleet may not import Warden (tests/contract/test_layering.py).
    """
    breaker = max(1, int(config.unhealthy_share_limit * pool_nodes))
    return max(1, min(config.max_per_pool, config.max_per_cluster, breaker))
