"""Names of cloud and cluster objects, derived from the fleet in one place.

Terraform stacks, generated manifests and the tools that talk to them all use
these, so a name is never spelled twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # names stay importable without the pydantic model (gkr must start fast)
    from fleet.model import Fleet

# Kubernetes identities that get Google service accounts through Workload Identity.
WARDEN_NAMESPACE = "warden"
WARDEN_KSA = "warden"
ARGOCD_NAMESPACE = "argocd"
ARGOCD_KSAS = ("argocd-application-controller", "argocd-repo-server")
# The Kubernetes service account team pods run as, one per team namespace. Each is bound to
# its own team's Google service account (team_service_account_id), never to another's.
TRAINER_KSA = "trainer"

# Prefixes inside a team's part of a checkpoint bucket (team_prefix): staged data may
# expire, committed checkpoints never.
STAGED_PREFIX = "staged/"
COMMITTED_PREFIX = "checkpoints/"
TEAMS_PREFIX = "teams/"
SERVICE_ACCOUNT_ID_MAX = 30  # IAM: account ids are 6 to 30 characters
# The roles with a Google service account of their own (service_account_id); teams get one each.
SERVICE_ACCOUNT_ROLES = ("nodes", "warden", "argocd")

# Kueue's topology levels on GKE, widest first.
TOPOLOGY_LEVELS = (
    "cloud.google.com/gce-topology-block",
    "cloud.google.com/gce-topology-subblock",
    "cloud.google.com/gce-topology-host",
    "kubernetes.io/hostname",
)
QUEUED_TOLERATION = {"key": "cloud.google.com/gke-queued", "operator": "Exists", "effect": "NoSchedule"}

# GKE taints a node it is about to reclaim (spot preemption, host maintenance); GPU pods
# tolerate it so they keep running, and checkpointing, until the node goes (gpu-recipes a3ultra).
IMPENDING_TERMINATION_TOLERATION = {
    "key": "cloud.google.com/impending-node-termination",
    "operator": "Exists",
    "effect": "NoSchedule",
}
NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"  # GKE's label: the node pool a node belongs to

GPU_TAINT_KEY = "nvidia.com/gpu"
GPU_RESOURCE = "nvidia.com/gpu"
POOL_LABEL = "meridian.dev/pool"
SYSTEM_POOL = "system"  # the node pool of the platform's own services (operators, Warden, Argo CD)
TEAM_LABEL = "meridian.dev/team"


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


def team_prefix(team: str) -> str:
    """The team's part of every checkpoint bucket: a managed folder only its account may use."""
    return f"{TEAMS_PREFIX}{team}/"


def workload_pool(fleet: Fleet) -> str:
    return f"{fleet.project.id}.svc.id.goog"


def workload_member(fleet: Fleet, namespace: str, ksa: str) -> str:
    return f"serviceAccount:{workload_pool(fleet)}[{namespace}/{ksa}]"


def team_namespace(team: str) -> str:
    return f"team-{team}"


def local_queue(team: str) -> str:
    """The team's Kueue LocalQueue, in its namespace."""
    return team


# Multi-network names pods use (annotation networking.gke.io/interfaces): eth1 on
# the gVNIC network, eth2..eth9 on rdma-0..rdma-7.
GVNIC_NETWORK_OBJECT = "gvnic-1"


def rdma_network_object(index: int) -> str:
    return f"rdma-{index}"
