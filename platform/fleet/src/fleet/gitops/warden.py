"""Warden's per-cluster configuration: its policy, generated from the spec."""

from __future__ import annotations

from typing import Any

from fleet import names
from fleet.capacity import cpu_pool_capacity, region_capacity
from fleet.catalog import thresholds
from fleet.gitops.objects import Obj, dump, obj
from fleet.gpu_faults import BUCKETS, UNKNOWN_ACTION, default_actions
from fleet.model import Fleet, Region

POLICY_CONFIGMAP = "warden-policy"
CRITICAL_QUOTA = "critical-pods"
# The node agent (system-node-critical) and the service (system-cluster-critical, 2 replicas).
CRITICAL_CLASSES = ("system-node-critical", "system-cluster-critical")
CRITICAL_HEADROOM = 8  # the service's replicas and a rollout's surge, on top of one agent per node


def policy(fleet: Fleet, region: Region) -> dict[str, Any]:
    w = fleet.warden
    actions = default_actions() | dict(w.xid_actions)
    return {
        "cluster": fleet.cluster_name(region),
        "region": region.name,
        "dry_run": w.dry_run,
        "circuit_breaker": {"unhealthy_share_limit": w.unhealthy_share_limit, "window_minutes": w.window_minutes},
        "concurrency": {"per_pool": w.max_remediations_per_pool, "per_cluster": w.max_remediations_per_cluster},
        "repeat_offender": {"count": w.repeat_offender_count, "days": w.repeat_offender_days},
        "drain_grace_seconds": w.drain_grace_seconds,
        "xid_buckets": {name: list(codes) for name, (codes, _) in BUCKETS.items()},
        "xid_actions": {str(code): actions[code] for code in sorted(actions)},
        "unknown_xid_action": UNKNOWN_ACTION,
        "signal_actions": dict(w.signal_actions),
        "nccl_failures": w.nccl_failures,
        "maintenance_lead_minutes": w.maintenance_lead_minutes,
        "probation": {"image": fleet.versions.trainer_image},
        "pools": [
            {
                "name": p.name,
                "zone": p.zone,
                "nodes": p.nodes,
                "gpus_per_node": p.machine.gpus,
                "capacity": p.capacity.mode.value,
                "preflight_args": list(thresholds(p.machine).args(1)),
            }
            for p in region.gpu_pools
        ],
    }


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
            POLICY_CONFIGMAP,
            names.WARDEN_NAMESPACE,
            data={"policy.yaml": dump([policy(fleet, region)])},
        ),
        critical_pod_quota(region),
    ]
