"""Names of cloud and cluster objects, derived from the fleet in one place.

Terraform stacks, generated manifests and the tools that talk to them all use
these, so a name is never spelled twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # names stay importable without the pydantic model (gkr must start fast)
    from fleet.model import Fleet

# The names every component shares are defined in contract.names; fleet's modules and infra reach
# them through here too, beside the names only the cloud side derives.
from contract.names import (
    ARGOCD_KSAS,
    ARGOCD_NAMESPACE,
    COMMITTED_PREFIX,
    DEFAULT_PRIORITY_ANNOTATION,
    GCP_SERVICE_ACCOUNT_ANNOTATION,
    GIB_HOST_PATH,
    GLOBAL_ACCESS_ANNOTATION,
    GPU_RESOURCE,
    GPU_TAINT_KEY,
    GVNIC_NETWORK_OBJECT,
    HOST_LABEL,
    HOSTNAME_LABEL,
    IMPENDING_TERMINATION_TOLERATION,
    INTERNAL_LB_ANNOTATION,
    NODE_POOL_LABEL,
    NVIDIA_HOST_PATH,
    POOL_LABEL,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    QUEUED_TOLERATION,
    STAGED_PREFIX,
    SWEEP_NAMESPACE,
    SWEEP_PRIORITY,
    SWEEP_QUEUE,
    TEAM_CAPABILITIES,
    TEAM_LABEL,
    TEAMS_PREFIX,
    TOPOLOGY_LEVELS,
    TRAINER_KSA,
    WARDEN_KSA,
    WARDEN_NAMESPACE,
    local_queue,
    rdma_network_object,
    team_namespace,
    team_prefix,
)

__all__ = [  # the shared names, re-exported (see above)
    "ARGOCD_KSAS",
    "ARGOCD_NAMESPACE",
    "COMMITTED_PREFIX",
    "DEFAULT_PRIORITY_ANNOTATION",
    "GCP_SERVICE_ACCOUNT_ANNOTATION",
    "GIB_HOST_PATH",
    "GLOBAL_ACCESS_ANNOTATION",
    "GPU_RESOURCE",
    "GPU_TAINT_KEY",
    "GVNIC_NETWORK_OBJECT",
    "HOSTNAME_LABEL",
    "HOST_LABEL",
    "IMPENDING_TERMINATION_TOLERATION",
    "INTERNAL_LB_ANNOTATION",
    "NODE_POOL_LABEL",
    "NVIDIA_HOST_PATH",
    "POOL_LABEL",
    "PRIORITY_LABEL",
    "QUEUED_TOLERATION",
    "QUEUE_LABEL",
    "STAGED_PREFIX",
    "SWEEP_NAMESPACE",
    "SWEEP_PRIORITY",
    "SWEEP_QUEUE",
    "TEAMS_PREFIX",
    "TEAM_CAPABILITIES",
    "TEAM_LABEL",
    "TOPOLOGY_LEVELS",
    "TRAINER_KSA",
    "WARDEN_KSA",
    "WARDEN_NAMESPACE",
    "local_queue",
    "rdma_network_object",
    "team_namespace",
    "team_prefix",
]

SERVICE_ACCOUNT_ID_MAX = 30  # IAM: account ids are 6 to 30 characters
# The roles with a Google service account of their own (service_account_id); teams get one each.
NODES_ROLE, WARDEN_ROLE, ARGOCD_ROLE = SERVICE_ACCOUNT_ROLES = ("nodes", "warden", "argocd")
# On every namespace whose jobs go through Kueue: the team namespaces and Warden's sweeps'. Kueue's
# managedJobsNamespaceSelector matches it (a label selector cannot OR two labels; fleet.gitops.kueue);
# only the platform project writes Namespaces, no tenant may (tests/tenancy/test_sweep_namespace.py).
KUEUE_MANAGED_LABEL = "meridian.dev/kueue-managed"
SYSTEM_POOL = "system"  # the node pool of the platform's own services (operators, Warden, Argo CD)


def main_network(fleet: Fleet) -> str:
    return f"{fleet.name}-vpc"


def gvnic_network(fleet: Fleet) -> str:
    return f"{fleet.name}-gvnic"


def region_subnet(fleet: Fleet, region: str) -> str:
    return f"{fleet.name}-{region}"


def gvnic_subnet(fleet: Fleet, region: str) -> str:
    return f"{fleet.name}-{region}-gvnic"


def rdma_network(fleet: Fleet, zone: str) -> str:
    return f"{fleet.name}-rdma-{zone}"


def rdma_subnet(fleet: Fleet, zone: str, index: int) -> str:
    return f"{fleet.name}-rdma-{zone}-{index}"


def roce_profile(fleet: Fleet, zone: str) -> str:
    return f"projects/{fleet.project.id}/global/networkProfiles/{zone}-vpc-roce"


def service_account_id(fleet: Fleet, role: str) -> str:
    """Account id of the Google service account for `role` (nodes, warden, trainer, argocd)."""
    return f"{fleet.name}-{role}"


def service_account_email(fleet: Fleet, role: str) -> str:
    return f"{service_account_id(fleet, role)}@{fleet.project.id}.iam.gserviceaccount.com"


def team_service_account_id(fleet: Fleet, team: str) -> str:
    """The team's own Google service account: the only one its pods can act as.

    `-team-` keeps it apart from the role accounts (a team named `warden` is not Warden)."""
    return f"{fleet.name}-team-{team}"


def team_service_account_email(fleet: Fleet, team: str) -> str:
    return f"{team_service_account_id(fleet, team)}@{fleet.project.id}.iam.gserviceaccount.com"


def workload_pool(fleet: Fleet) -> str:
    return f"{fleet.project.id}.svc.id.goog"


def workload_member(fleet: Fleet, namespace: str, ksa: str) -> str:
    return f"serviceAccount:{workload_pool(fleet)}[{namespace}/{ksa}]"
