"""Warden's per-cluster configuration (contract.warden), generated from the spec, its pod quota and the
namespace its deep check Jobs run in."""

from __future__ import annotations

from contract import warden as contract
from contract.names import WARDEN_CONFIGMAP
from contract.signals import SIGNAL_ACTIONS, default_actions
from fleet import names
from fleet.capacity import cpu_pool_capacity, region_capacity
from fleet.catalog import thresholds
from fleet.gitops.kueue import KUEUE_MANAGED, sweep_local_queue
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


RBAC = "rbac.authorization.k8s.io/v1"
SWEEP_ROLE = "warden-deep-checks"  # its Role and RoleBinding there
# What warden.sweeper does with its deep check Jobs there: list them by label, create them, delete them
# (with their pods, by propagation). Their pods it lists cluster-wide already (kustomize/base/warden/rbac.yaml).
SWEEP_JOB_VERBS = ["list", "create", "delete"]


def sweep_namespace_objects() -> list[Obj]:
    """Where Warden's deep check Jobs run (contract.names.SWEEP_NAMESPACE): a namespace Kueue manages
    (fleet.gitops.kueue), with no team label, so no tenancy policy, quota or team binding applies there.

    Pod Security "privileged": the check mounts the host's NVIDIA driver (deepcheck.sweep_job), which baseline
    refuses, as in Warden's own namespace. No traffic either way: the check runs preflight on its own node with
    no peers, no metrics port and no service account token, so every pod there is denied ingress and egress.
    Only Warden may write Jobs there; no tenant may write a Namespace (tests/tenancy/test_sweep_namespace.py).
    """
    namespace = names.SWEEP_NAMESPACE
    labels = {"app.kubernetes.io/part-of": "meridian", "pod-security.kubernetes.io/enforce": "privileged"}
    return [
        obj("v1", "Namespace", namespace, labels={**labels, **KUEUE_MANAGED}),
        obj(
            "networking.k8s.io/v1",
            "NetworkPolicy",
            "deny-by-default",
            namespace,
            spec={"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
        ),
        obj(
            RBAC,
            "Role",
            SWEEP_ROLE,
            namespace,
            rules=[{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": SWEEP_JOB_VERBS}],
        ),
        obj(
            RBAC,
            "RoleBinding",
            SWEEP_ROLE,
            namespace,
            roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SWEEP_ROLE},
            subjects=[{"kind": "ServiceAccount", "name": names.WARDEN_KSA, "namespace": names.WARDEN_NAMESPACE}],
        ),
        sweep_local_queue(),
    ]


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
        *sweep_namespace_objects(),
        # The operators' rights (what the runbooks use), here because Warden's namespace exists from this wave on.
        *operator_objects(fleet),
    ]
