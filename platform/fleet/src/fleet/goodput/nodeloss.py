"""A node lost under a running RayJob, layer by layer, as shipped after issue 38 (pure).

What each layer does when a GPU host vanishes (it stops answering, without
resetting connections: a dead power supply, board or CPU), read from the
sources at the versions Meridian pins:

Each layer's sources, file and line at the pinned release, are in
fleet.controllers.sources.BEHAVIOURS (the key in brackets below).

- Ray 2.60.0 ([ray-node-death]; its defaults as the pinned build reports them,
  `ray._raylet.Config`, and `src/ray/gcs/gcs_health_check_manager.cc`
  `StartHealthCheck` at the stored commit 2a48f197, the snapshot holding no
  tag): the GCS marks the node dead
  after `health_check_failure_threshold` (5) failed checks, each waiting out
  `health_check_timeout_ms` (10 s), the next sent `health_check_period_ms` (3 s)
  after a failure: up to 65 s. The trainer's supervisor then sees its group's
  actors die and moves the group to the run's spare; the other groups only
  stall for torchft's heartbeat timeout and train on.
- Kubernetes: the node's Ready condition goes Unknown after
  `--node-monitor-grace-period` (50 s, kubernetes.io "Node Status"), and the
  `node.kubernetes.io/unreachable:NoExecute` taint deletes the pod after its
  `tolerationSeconds`, 300 s from the DefaultTolerationSeconds admission plugin
  (kubernetes.io "Taints and Tolerations", Taint based evictions). With the
  kubelet unreachable the pod stays Terminating until its node is recreated or
  deleted.
- KubeRay v1.7.0 ([kuberay-terminating-pod], [kuberay-ready-once]):
  `reconcilePods` counts every listed worker pod, Terminating ones included,
  as running unless `shouldDeletePod` deleted it in that pass (it deletes only
  pods that failed or whose Ray container ended), so `diff` is 0 and no
  replacement pod is made while the old one exists.
- Kueue v0.19.2 ([kueue-node-failed], [kueue-fail-fast], [kueue-second-node],
  [kueue-pods-ready]; `pkg/controller/tas/node_controller.go`): a NotReady node is
  marked failed for a workload once that workload's pods on it stop
  progressing (`getWorkloadStatus`, `checkPodsOnNode`, `hasProgressingPods`:
  TASReplaceNodeOnPodTermination, Beta, on), i.e. at the taint eviction.
  `NodeFailureDelay` (30 s, `pkg/controller/tas/constants.go`) applies only
  under TASReplaceNodeDueToNotReadyOverFixedTime, deprecated and off by
  default since 0.19 (`pkg/features/kube_features.go`). A node Warden cordons
  (an untolerated NoSchedule taint: TASReplaceNodeOnNodeTaints, Beta, on) is
  marked once Warden evicts its pods. Then (`pkg/scheduler/scheduler.go`
  `processEntry`): with TASFailedNodeReplacementFailFast on (Kueue's default)
  a replacement search that does not fit evicts the whole workload
  (`handleFailedTASReplacement`, `evictWorkloadAfterFailedTASReplacement`);
  off (as Meridian renders it after issue 38) the workload keeps its admission
  and is tried again each scheduling cycle for a node in the same domain.
  Either way a second failed node of the same workload while one is still
  marked evicts it (`evictWorkloadIfNeeded`; test/integration/singlecluster/
  tas/tas_test.go "should evict workload when multiple assigned nodes fail"),
  and a node that comes back Ready leaves the mark ("should remove node from
  unhealthyNodes when the node recovers"). A RayJob's PodsReady is
  `RayClusterStatus.State == Ready` (`pkg/controller/jobs/rayjob/
  rayjob_controller.go` `PodsReady`), which KubeRay sets once and never
  clears (`calculateStatus`), so `waitForPodsReady.recoveryTimeout` never
  fires: these are the only ways a node loss reaches the gang.
- The VM: Warden leaves NotReady nodes to GKE's auto-repair
  (contract.signals: `not_ready` -> `none`), which recreates it (Costs'
  `gke_autorepair_s` + `replace_s`); Warden's own replacements report the host
  first and, after issue 38, wait for that operation (`faulty_report_wait_s`).
  The old pod goes with the old node, KubeRay makes the replacement pod (the
  image is pre-pulled), its Ray worker joins and is the run's spare again.

The fleet keeps no free node in a pool (each modelled job holds its whole
pool), so Kueue's search for a replacement never succeeds: with FailFast on a
node loss evicts the RayJob; off, the node stays marked until it comes back.
"""

from __future__ import annotations

from dataclasses import dataclass

from contract.warden import Config
from fleet.goodput.costs import Costs, repair_s, warden_action
from fleet.goodput.failures import CAUSES, Cause


def kueue_failed_s(cause: Cause, config: Config, costs: Costs) -> float | None:
    """After the failure, when Kueue marks the node of `cause` failed for the job's TAS assignment.

    None: the node stays in service. A vanished host: once the taint eviction deletes its pod. A node
    Warden repairs: at once (it cordons and evicts); one held for a person: when the person acts.
    """
    if cause.signal == "not_ready":
        return costs.pod_eviction_s
    action = warden_action(cause, config)
    if action is None:
        return None
    return costs.review_s if action == "review" else 0.0


@dataclass(frozen=True)
class Stage:
    at_s: float  # since the host vanished
    layer: str
    what: str


@dataclass(frozen=True)
class NodeLoss:
    """The path of one vanished host, as shipped (FailFast off), and Kueue's default for comparison."""

    cause: str  # the failure table's row it stands for
    group: tuple[Stage, ...]  # until the failed group trains again on the run's spare
    node: tuple[Stage, ...]  # until the node is the run's spare again
    fail_fast: tuple[Stage, ...]  # FailFast on: the gang's path instead
    heal_s: float  # a replacement group's start and heal, once it has a node

    @property
    def group_down_s(self) -> float:
        """One group's share of the run missing, with a spare at hand: the sum of the group's stages."""
        return self.group[-1].at_s

    @property
    def group_down_without_spare_s(self) -> float:
        """Without a spare the group waits for the node itself."""
        return self.node[-1].at_s + self.heal_s

    @property
    def gang_down_s(self) -> float:
        """FailFast on: every group, from the eviction until the job trains again (plus the replay)."""
        return self.fail_fast[-1].at_s - self.fail_fast[0].at_s


def _group(costs: Costs) -> tuple[Stage, ...]:
    t = costs.ray_node_death_s
    detect = (
        f"the GCS marks the node dead: {costs.ray_health_check_failures} failed health checks of"
        f" {costs.ray_health_check_timeout_s:g} s, {costs.ray_health_check_period_s:g} s apart;"
        " its group's actors die, the other groups train on"
    )
    stages = [Stage(t, "Ray", detect)]
    for seconds, layer, what in (
        (costs.restart_to_heal_s, "trainer", "the supervisor restarts the group on the run's spare"),
        (costs.gpu_group_init_s, "trainer", "the group's CUDA contexts and NCCL communicators"),
        (costs.transfer_s, "torchft", "the group heals: its state from a live group"),
    ):
        t += seconds
        stages.append(Stage(t, layer, f"{what} ({seconds:.3g} s)"))
    return tuple(stages)


def _node(costs: Costs, config: Config, cause: Cause) -> tuple[Stage, ...]:
    evicted = costs.pod_eviction_s
    back = repair_s(cause, config, costs)
    return (
        Stage(costs.node_monitor_grace_s, "Kubernetes", "Ready goes Unknown (node-monitor-grace-period)"),
        Stage(
            evicted, "Kubernetes", f"the taint eviction deletes the pod ({costs.toleration_s:g} s later): Terminating"
        ),
        Stage(evicted, "KubeRay", "counts the Terminating pod as running: no replacement pod (reconcilePods)"),
        Stage(evicted, "Kueue", "marks the node failed; FailFast off: admission kept, a replacement sought"),
        Stage(back, "GKE", "auto-repair has recreated the VM (Warden leaves NotReady nodes to it)"),
        Stage(back, "Kueue", "the node is Ready again, no longer marked; KubeRay makes the replacement pod"),
        Stage(back + costs.pod_start_s, "Kubernetes", f"the pod runs, image pre-pulled ({costs.pod_start_s:g} s)"),
        Stage(back + costs.rejoin_s, "Ray", f"its worker joins ({costs.ray_join_s:g} s): the run's spare again"),
    )


def _fail_fast(costs: Costs, config: Config, cause: Cause) -> tuple[Stage, ...]:
    back = repair_s(cause, config, costs)
    restart = f"every pod started ({costs.job_restart_s:g} s), resumed from the durable checkpoint"
    return (
        Stage(costs.pod_eviction_s, "Kueue", "no free node in the sub-block: the whole RayJob is evicted"),
        Stage(back, "Kueue", "readmitted once the pool is whole again (the gang needs every node)"),
        Stage(back + costs.job_restart_s, "trainer", restart),
    )


def vanished_host(costs: Costs, config: Config) -> NodeLoss:
    """The path for the failure table's first cause whose host vanishes (NotReady)."""
    cause = next(c for c in CAUSES if c.signal == "not_ready")
    return NodeLoss(
        cause.component,
        _group(costs),
        _node(costs, config, cause),
        _fail_fast(costs, config, cause),
        costs.supervised_heal_s,
    )


def lines(path: NodeLoss) -> list[str]:
    """`meridian goodput`'s account of the path: each stage at its time since the host vanished."""

    def stage(s: Stage) -> str:
        return f"  t+{s.at_s:>5,.0f} s  {s.layer:<10} {s.what}"

    return [
        f"node lost under a running RayJob ({path.cause} and the other NotReady causes), as shipped"
        " (Kueue's TASFailedNodeReplacementFailFast off):",
        *map(stage, path.group),
        f"  -> one group down {path.group_down_s:,.0f} s with the run's spare"
        f" ({path.group_down_without_spare_s:,.0f} s without one), not the gang; meanwhile its node:",
        *map(stage, path.node),
        "with FailFast on (Kueue's default):",
        *map(stage, path.fail_fast),
        f"  -> every group down {path.gang_down_s:,.0f} s, and the work since the durable checkpoint done again",
        "either way a second failed node of the same RayJob while one is still marked evicts the gang",
    ]
