"""Warden's per-cluster configuration (contract.warden), generated from the spec, and its pod quota."""

from __future__ import annotations

from contract import warden as contract
from contract.names import WARDEN_CONFIGMAP
from contract.signals import SIGNAL_ACTIONS, default_actions
from fleet import names
from fleet.capacity import cpu_pool_capacity, region_capacity
from fleet.catalog import thresholds
from fleet.gitops.kueue import sweep_local_queue
from fleet.gitops.objects import Obj, obj
from fleet.gitops.operators import operator_objects
from fleet.model import Fleet, Region

CRITICAL_QUOTA = "critical-pods"
# The node agent (system-node-critical) and the service (system-cluster-critical, 2 replicas).
CRITICAL_CLASSES = ("system-node-critical", "system-cluster-critical")
CRITICAL_HEADROOM = 8  # the service's replicas and a rollout's surge, on top of one agent per node


def config(fleet: Fleet, region: Region) -> contract.Config:
    """Warden's config for the region's cluster: the spec's `warden:` settings in seconds, over the contract's tables."""
    w = fleet.warden
    return contract.Config(
        cluster=fleet.cluster_name(region),
        region=region.name,
        dry_run=w.dry_run,
        act_on=w.act_on,
        unhealthy_share_limit=w.unhealthy_share_limit,
        window_s=w.window_minutes * 60.0,
        max_per_pool=w.max_remediations_per_pool,
        max_per_cluster=w.max_remediations_per_cluster,
        repeat_count=w.repeat_offender_count,
        repeat_window_s=w.repeat_offender_days * 86400.0,
        drain_grace_s=float(w.drain_grace_seconds),
        xid_actions=default_actions() | dict(w.xid_actions),
        signal_actions=SIGNAL_ACTIONS | dict(w.signal_actions),
        nccl_failures=w.nccl_failures,
        maintenance_lead_s=w.maintenance_lead_minutes * 60.0,
        probation_image=fleet.versions.trainer_image,
        burn_in=w.burn_in,
        burn_in_max_per_pool=w.burn_in_max_per_pool,
        burn_in_max_age_s=w.burn_in_max_age_hours * 3600.0,
        sweeps=w.sweeps,
        sweep_every_s=w.sweep_every_days * 86400.0,
        sweep_idle_s=w.sweep_idle_minutes * 60.0,
        sweep_max_per_pool=w.sweep_max_per_pool,
        deep_check_timeout_s=w.deep_check_timeout_minutes * 60.0,
        pools={p.name: thresholds(p.machine) for p in region.gpu_pools},
    )


def critical_pod_quota(region: Region) -> Obj:
    """GKE admits system-*-critical pods outside kube-system only with a ResourceQuota naming the class.

    REFERENCE.md; Kubernetes "Limit Priority Class consumption by default"
    (https://kubernetes.io/docs/concepts/policy/resource-quotas/#limit-priority-class-consumption-by-default).
    The ceiling is every node the region can have, so it never blocks a node's agent.
    """
    nodes = region_capacity(region).nodes + sum(cpu_pool_capacity(p).nodes for p in region.cpu_pools)
    return obj(
        "v1",
        "ResourceQuota",
        CRITICAL_QUOTA,
        names.WARDEN_NAMESPACE,
        spec={
            "hard": {"pods": str(nodes + CRITICAL_HEADROOM)},
            "scopeSelector": {
                "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": list(CRITICAL_CLASSES)}]
            },
        },
    )


def warden_objects(fleet: Fleet, region: Region) -> list[Obj]:
    return [
        obj(
            "v1",
            "ConfigMap",
            WARDEN_CONFIGMAP,
            names.WARDEN_NAMESPACE,
            data={contract.FILE: contract.dumps(config(fleet, region))},
        ),
        critical_pod_quota(region),
        sweep_local_queue(),
        # The operators' rights (what the runbooks use), here because Warden's namespace exists from this wave on.
        *operator_objects(fleet),
    ]
