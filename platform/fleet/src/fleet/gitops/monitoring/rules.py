"""Alerts, as one GMP ClusterRules object per cluster: each with a threshold and a runbook line.

A run is (namespace, run): its name is its team's choice, so every rule that groups or joins by `run` also does
by `namespace`, the label the scrape takes from the pod's real namespace (scrape.py; queries.run_scoping checks).
The run alerts also keep `meridian_job` (gkr's job label of the pods, scrape.JOB) and every alert keeps `cluster`:
the runbook pages select the run's pods and the cluster's kubeconfig context from them (queries.alert_labels).

ClusterRules (not Rules): the rule evaluator scopes a ClusterRules object to its cluster but not to a
namespace, so the stuck-run alert can join trainer series (team namespaces) with kube-state-metrics'. Every
expression is cross-checked (queries.py) against the metric names that exist; the thresholds are defaults,
each explained beside it and in the README's alert table.
"""

from __future__ import annotations

from dataclasses import dataclass

from contract import names
from contract.metrics import TRAINER, WARDEN
from fleet.gitops.monitoring.scrape import API, JOB, KUEUE_NAMESPACE, PLATFORM_NAMESPACES
from fleet.gitops.objects import Obj, obj

RUNBOOK = "runbook"
KUBE_SYSTEM = "kube-system"
RUNBOOK_URL = "runbook_url"  # the alert's page: platform/fleet/runbooks/<alert>.md
RUNBOOKS = "platform/fleet/runbooks"


# The catalog's names, by attribute: the rules and dashboards never spell a metric of their own.
LAST_COMMIT = TRAINER.last_commit_timestamp_seconds.name
GOODPUT = TRAINER.goodput_seconds.name
CHECKPOINT = TRAINER.checkpoint_seconds.name
# Platform series are selected by the namespace of the pod that exported them (issue 39): GMP writes `namespace`
# from the scraped pod's real namespace and no relabelling may change it (scrape.py), a PodMonitoring only scrapes
# pods of its own namespace (prometheus-engine v0.17.2 pod_config.go scrapeConfigs: keep on
# __meta_kubernetes_namespace), and no team may create pods or monitoring objects in the platform's namespaces. A
# team pod serving `warden_leader` is stored under its own namespace, so these selectors never read it.
WARDEN_SERIES = f'namespace="{names.WARDEN_NAMESPACE}"'
LEADER_SERIES = f"{WARDEN.leader.name}{{{WARDEN_SERIES}}}"
LEADER = f"on (cluster, namespace, pod) group_left {LEADER_SERIES}"  # only the leading Warden replica counts
KUEUE = f'namespace="{KUEUE_NAMESPACE}", replica_role!="follower"'  # a follower Kueue replica reports too
# A cluster is there when GMP scrapes a platform component in it (Prometheus' own `up`, with the target's labels) or
# kube-state-metrics describes a pod of kube-system (its `namespace` is the described pod's: a team's is its own).
CLUSTERS = f'up{{namespace=~"{"|".join(PLATFORM_NAMESPACES)}"}} or kube_pod_status_phase{{namespace="{KUBE_SYSTEM}"}}'

# Defaults, in seconds or ratios (README "Alerts").
STUCK_AFTER_S = 900  # steps commit every few seconds; a heal or a staged checkpoint takes a minute or two
GOODPUT_FLOOR = 0.90  # productive share of a run's group-seconds over an hour (the fleet's goal is 97%)
HELD_FOR = "15m"
PENDING_FOR = "2h"
DURABLE_SLOW_S = 1800  # p95 from a checkpoint's start until durable; staging is what blocks training
LEADERLESS_FOR = "5m"  # a handover takes 15-25 s (Warden's Lease); minutes without one leave faults unhandled
# Two replicas claiming at once: each reads its own fenced holds(), so a handover never overlaps; scrapes of the two
# replicas are up to one interval (30 s) apart, which two evaluations 60 s apart cannot both see.
SPLIT_FOR = "2m"
# Per pool: Llama 3 saw 419 interruptions in 54 days on 16,384 GPUs, about one per 1,024 GPUs every two days.
XIDS_PER_HOUR = 4


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    duration: str  # `for`: how long the expression must hold
    severity: str  # critical: pages; warning: a ticket
    threshold: str  # for people: the README table
    summary: str
    runbook: str  # what it means, what to do

    def rule(self, docs: str) -> dict[str, object]:
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.duration,
            "labels": {"severity": self.severity},
            "annotations": {
                "summary": self.summary,
                RUNBOOK: self.runbook,
                RUNBOOK_URL: f"{docs}/{RUNBOOKS}/{self.name}.md",
            },
        }


ALERTS = (
    Alert(
        "RunStoppedCommitting",
        f"(time() - max by (cluster, namespace, pod, run, region, group, {JOB}) ({LAST_COMMIT}) > {STUCK_AFTER_S})"
        ' and on (cluster, namespace, pod) (kube_pod_status_phase{phase="Running"} == 1)',
        "5m",
        "critical",
        f"no committed step for {STUCK_AFTER_S // 60} min while the pod is Running",
        "Run {{ $labels.run }} of {{ $labels.namespace }} group {{ $labels.group }} ({{ $labels.pod }}) has not committed a step for "
        "{{ $value | humanizeDuration }}.",
        "Kubernetes sees Running pods but the collective is stuck (a hung NCCL call, a dead peer torchft has not "
        "noticed): read the group's log for its last step and the Lighthouse's quorum; if one node is the cause, "
        "report it to Warden (NCCL failure Event) and delete the pod so torchft heals from a peer.",
    ),
    Alert(
        "RunGoodputLow",
        f'sum by (cluster, namespace, run, {JOB}) (rate({GOODPUT}{{category="productive"}}[1h]))'
        f" / sum by (cluster, namespace, run, {JOB}) (rate({GOODPUT}[1h])) < {GOODPUT_FLOOR}",
        "30m",
        "warning",
        f"productive share < {GOODPUT_FLOOR:.0%} over 1 h",
        "Run {{ $labels.run }} of {{ $labels.namespace }} in {{ $labels.cluster }} spent only {{ $value | humanizePercentage }} of its "
        "group-seconds training over the last hour.",
        "Open the run dashboard's goodput breakdown: much startup means restarts (check Warden and the pods' "
        "restarts), checkpoint means staging blocks too long (raise the interval), failed/replayed means "
        "crashes and lost steps since the last checkpoint.",
    ),
    Alert(
        "WardenBreakerOpen",
        f"sum by (cluster) ({WARDEN.blocked.name}{{{WARDEN_SERIES}}} * {LEADER}) > 0",
        "10m",
        "warning",
        "the circuit breaker keeps suspect nodes in service for 10 min",
        "Warden's circuit breaker keeps {{ $value }} suspect node(s) in service in {{ $labels.cluster }}.",
        "Too many nodes look unhealthy at once for Warden to act alone (a fleet-wide cause: driver, network, "
        "power, a bad image): find the common cause in Warden's Events and the Warden dashboard before "
        "releasing nodes by hand; do not raise the breaker's limit to make this go away.",
    ),
    Alert(
        "WardenNoLeader",
        # Every cluster is seen (CLUSTERS): one whose Warden replicas lead none, report none or run none.
        f"group by (cluster) ({CLUSTERS}) unless on (cluster) (max by (cluster) ({LEADER_SERIES}) == 1)",
        LEADERLESS_FOR,
        "critical",
        f"no Warden replica leads for {LEADERLESS_FOR}",
        "No Warden replica in {{ $labels.cluster }} has held its Lease for " + LEADERLESS_FOR + ".",
        "Node faults go unhandled meanwhile. Check Warden's pods and their 'lease' log lines, the Lease warden in "
        "namespace warden (a record Warden cannot read is taken over 15 s after a replica first sees it) and the API "
        "server's health, in the alert's cluster (the runbook's commands). Every replica serves "
        f"{WARDEN.leader.name}, leading or not: no series at all means no replica runs or GMP does not scrape them.",
    ),
    Alert(
        "WardenSplitLeadership",
        f"sum by (cluster) ({LEADER_SERIES}) > 1",
        SPLIT_FOR,
        "critical",
        f"more than one Warden replica leads, for {SPLIT_FOR}",
        "{{ $value }} Warden replicas in {{ $labels.cluster }} claim the Lease at once.",
        "Each replica reports its own fenced view, so two leaders mean something else writes the Lease or a replica "
        "is wedged: pause the automated sync of Argo CD application warden (its self-heal would undo a scale) and "
        "scale Warden to one replica, as the runbook shows; read who wrote the Lease in the audit log, and check "
        "Warden's Events for conflicting actions on nodes.",
    ),
    Alert(
        "NodesHeldForPerson",
        f'sum by (cluster, pool) ({WARDEN.nodes.name}{{{WARDEN_SERIES}, phase="held"}} * {LEADER}) > 0',
        HELD_FOR,
        "warning",
        f"any node held for {HELD_FOR}",
        "{{ $value }} node(s) of pool {{ $labels.pool }} in {{ $labels.cluster }} are held for a person.",
        "Warden stopped acting on these nodes (repeat offender, unreadable state, an action that failed): read "
        "the node's Warden record annotation and Events, then repair or replace it and return it to Warden.",
    ),
    Alert(
        "WorkloadsPendingLong",
        f"sum by (cluster, cluster_queue) (kueue_pending_workloads{{{KUEUE}}}) > 0"
        " unless on (cluster, cluster_queue)"
        f" sum by (cluster, cluster_queue) (increase(kueue_admitted_workloads_total{{{KUEUE}}}[{PENDING_FOR}])) > 0",
        PENDING_FOR,
        "warning",
        f"workloads pending and none admitted for {PENDING_FOR}",
        "ClusterQueue {{ $labels.cluster_queue }} in {{ $labels.cluster }} has had pending workloads and "
        f"admitted none for {PENDING_FOR}.",
        "Check the queue's quota against its usage on the Kueue dashboard: a gang larger than the free "
        "quota waits for preemption or reclaim; flex-start waits for capacity; an inadmissible workload "
        "(kubectl describe workload) asks for a flavor or shape the queue cannot give.",
    ),
    Alert(
        "CheckpointDurableStalled",
        f'sum by (cluster, namespace, run, group, {JOB}) (increase({CHECKPOINT}_count{{state="staged"}}[1h])) > 0'
        " unless on (cluster, namespace, run, group)"
        f' sum by (cluster, namespace, run, group) (increase({CHECKPOINT}_count{{state="durable"}}[1h])) > 0',
        "15m",
        "critical",
        "checkpoints staged but none durable for 1 h",
        "Run {{ $labels.run }} of {{ $labels.namespace }} group {{ $labels.group }} staged checkpoints but made none durable in an hour.",
        "Training continues on staged copies that a crash would lose: check the checkpoint bucket (gcsfuse "
        "errors in the pod, quota, permissions on the team's folder) and the uploader's log.",
    ),
    Alert(
        "CheckpointDurableSlow",
        f"histogram_quantile(0.95, sum by (cluster, namespace, run, {JOB}, le)"
        f' (rate({CHECKPOINT}_bucket{{state="durable"}}[1h]))) > {DURABLE_SLOW_S}',
        "30m",
        "warning",
        f"p95 time to durable > {DURABLE_SLOW_S // 60} min",
        "Run {{ $labels.run }} of {{ $labels.namespace }}: checkpoints take {{ $value | humanizeDuration }} (p95) to become durable.",
        "Durable checkpoints lag the staged ones: a crash now replays more steps. Check the bucket's region "
        "(it must be the run's), gcsfuse throughput, and whether the checkpoint grew.",
    ),
    Alert(
        "GpuXidRateHigh",
        f"sum by (cluster, pool) (increase({WARDEN.xids.name}{{{WARDEN_SERIES}}}[1h]) * {LEADER}) > {XIDS_PER_HOUR}",
        "0m",
        "warning",
        f"> {XIDS_PER_HOUR} GPU Xids per pool per hour",
        "Pool {{ $labels.pool }} in {{ $labels.cluster }} reported {{ $value }} GPU Xid errors in the last hour.",
        "Many GPUs of one pool failing at once points at a shared cause (driver or image rollout, a power or "
        "cooling domain, one reservation block): compare Xid codes on the Warden dashboard and pause rollouts.",
    ),
)


def docs_url(repo: str, revision: str) -> str:
    """Where the runbooks are read: the fleet's GitOps repository at its revision (GitHub's blob URLs)."""
    return f"{repo.removesuffix('.git')}/blob/{revision}"


def cluster_rules(docs: str) -> Obj:
    groups = [{"name": "meridian", "interval": "60s", "rules": [a.rule(docs) for a in ALERTS]}]
    return obj(API, "ClusterRules", "meridian-alerts", spec={"groups": groups})
