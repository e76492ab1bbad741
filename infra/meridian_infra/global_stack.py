"""The `global` stack: what every region shares.

Project services, the two global VPCs (cluster and gVNIC), service accounts
and their Workload Identity bindings, the warden role, the image registry and
the dataset buckets. Region stacks read its outputs through remote state.
"""

from __future__ import annotations

from cdktn import TerraformOutput, TerraformStack
from cdktn_provider_google.artifact_registry_repository import (
    ArtifactRegistryRepository,
    ArtifactRegistryRepositoryDockerConfig,
)
from cdktn_provider_google.artifact_registry_repository_iam_member import ArtifactRegistryRepositoryIamMember
from cdktn_provider_google.binary_authorization_policy import (
    BinaryAuthorizationPolicy,
    BinaryAuthorizationPolicyAdmissionWhitelistPatterns,
    BinaryAuthorizationPolicyDefaultAdmissionRule,
)
from cdktn_provider_google.compute_network import ComputeNetwork
from cdktn_provider_google.project_iam_custom_role import ProjectIamCustomRole
from cdktn_provider_google.project_iam_member import ProjectIamMember
from cdktn_provider_google.project_service import ProjectService
from cdktn_provider_google.provider import GoogleProvider
from cdktn_provider_google.service_account import ServiceAccount
from cdktn_provider_google.service_account_iam_member import ServiceAccountIamMember
from cdktn_provider_google.storage_bucket_iam_member import StorageBucketIamMember
from constructs import Construct

from contract.warden_iam import role_permissions
from fleet import images, names
from fleet.model import Fleet
from meridian_infra.backend import Backend, use_backend
from meridian_infra.common import MTU, labels, private_bucket

SERVICES = (
    "artifactregistry.googleapis.com",
    "binaryauthorization.googleapis.com",  # clusters enforce the project policy defined below
    "compute.googleapis.com",
    "container.googleapis.com",
    "iam.googleapis.com",
    "iamcredentials.googleapis.com",
    "logging.googleapis.com",
    "monitoring.googleapis.com",
    "storage.googleapis.com",
)

ROLES = names.SERVICE_ACCOUNT_ROLES  # team accounts come one per team (names.team_service_account_id)


def team_output(team: str) -> str:
    """The global stack's output naming a team's service account (read by region stacks)."""
    return f"team_{team.replace('-', '_')}_service_account"


def project_services(stack: Construct) -> dict[str, ProjectService]:
    return {
        service: ProjectService(stack, f"service_{service.split('.')[0]}", service=service, disable_on_destroy=False)
        for service in SERVICES
    }


def binary_authorization(stack: Construct, fleet: Fleet, service: ProjectService) -> None:
    """Every cluster enforces this policy (PROJECT_SINGLETON_POLICY_ENFORCE): deny any image
    that is not one the fleet deploys; Google's global policy admits GKE's own system images."""
    BinaryAuthorizationPolicy(
        stack,
        "binary_authorization",
        global_policy_evaluation_mode="ENABLE",
        default_admission_rule=BinaryAuthorizationPolicyDefaultAdmissionRule(
            evaluation_mode="ALWAYS_DENY", enforcement_mode="ENFORCED_BLOCK_AND_AUDIT_LOG"
        ),
        admission_whitelist_patterns=[
            BinaryAuthorizationPolicyAdmissionWhitelistPatterns(name_pattern=p) for p in images.allowlist(fleet)
        ],
        depends_on=[service],
    )


def global_networks(stack: Construct, fleet: Fleet) -> dict[str, ComputeNetwork]:
    """The cluster VPC and the gVNIC VPC, by output name: global networks whose regional subnets live in region
    stacks."""
    return {
        output: ComputeNetwork(
            stack, f"network_{key}", name=name, auto_create_subnetworks=False, routing_mode="GLOBAL", mtu=MTU
        )
        for output, key, name in (
            ("main_network", "main", names.main_network(fleet)),
            ("gvnic_network", "gvnic", names.gvnic_network(fleet)),
        )
    }


def role_accounts(stack: Construct, fleet: Fleet) -> dict[str, ServiceAccount]:
    return {
        role: ServiceAccount(
            stack,
            f"sa_{role}",
            account_id=names.service_account_id(fleet, role),
            display_name=f"Meridian {role}",
        )
        for role in ROLES
    }


def team_accounts(stack: Construct, fleet: Fleet) -> dict[str, ServiceAccount]:
    """One account per team: a team's pods act only as their own team, so a checkpoint
    grant on one team's folder (region stacks) admits no other team."""
    return {
        t.name: ServiceAccount(
            stack,
            f"sa_team_{t.name}",
            account_id=names.team_service_account_id(fleet, t.name),
            display_name=f"Meridian team {t.name}",
        )
        for t in fleet.teams
    }


def _member(account: ServiceAccount) -> str:
    return f"serviceAccount:{account.email}"


def image_registry(stack: Construct, fleet: Fleet, accounts: dict[str, ServiceAccount]) -> None:
    """GKE nodes: the minimal node role, and image pulls from the fleet registry (Argo CD's too)."""
    ProjectIamMember(
        stack,
        "nodes_default",
        project=fleet.project.id,
        role="roles/container.defaultNodeServiceAccount",
        member=_member(accounts[names.NODES_ROLE]),
    )
    registry = ArtifactRegistryRepository(
        stack,
        "registry",
        location=fleet.registry.location,
        repository_id=fleet.registry.repository,
        format="DOCKER",
        description="Meridian images: warden, trainer (pinned by digest in fleet.yaml)",
        # A tag, once pushed, names the same image for good: no push, retag or delete moves it
        # (https://cloud.google.com/artifact-registry/docs/repositories/update-repo-settings, "immutable image
        # tags"). The images workflow pushes by digest and tags a version once; the plan review accepts an
        # image pinned by version only while this holds (review.images).
        docker_config=ArtifactRegistryRepositoryDockerConfig(immutable_tags=True),
    )
    for role in (names.NODES_ROLE, names.ARGOCD_ROLE):
        ArtifactRegistryRepositoryIamMember(
            stack,
            f"registry_reader_{role}",
            location=fleet.registry.location,
            repository=registry.name,
            role="roles/artifactregistry.reader",
            member=_member(accounts[role]),
        )


def workload_identity(
    stack: Construct, fleet: Fleet, accounts: dict[str, ServiceAccount], teams: dict[str, ServiceAccount]
) -> None:
    """Which Kubernetes service accounts act as which Google service account.

    The identity pool is per project, so these bindings hold in every cluster; what each may touch is
    granted per region.
    """
    bindings = [(names.WARDEN_ROLE, accounts[names.WARDEN_ROLE], names.WARDEN_NAMESPACE, names.WARDEN_KSA)]
    bindings += [
        (names.ARGOCD_ROLE, accounts[names.ARGOCD_ROLE], names.ARGOCD_NAMESPACE, ksa) for ksa in names.ARGOCD_KSAS
    ]
    # Each team account admits exactly its own namespace's KSA.
    bindings += [("team", teams[t], names.team_namespace(t), names.TRAINER_KSA) for t in teams]
    for role, account, namespace, ksa in bindings:
        ServiceAccountIamMember(
            stack,
            f"wi_{role}_{namespace}_{ksa}",
            service_account_id=account.name,
            role="roles/iam.workloadIdentityUser",
            member=names.workload_member(fleet, namespace, ksa),
        )


def dataset_buckets(stack: Construct, fleet: Fleet, teams: dict[str, ServiceAccount]) -> None:
    for dataset in fleet.buckets.datasets:
        bucket = private_bucket(stack, f"dataset_{dataset.name}", dataset.name, dataset.location)
        for team, account in teams.items():  # datasets are shared reading: every team may read them
            StorageBucketIamMember(
                stack,
                f"dataset_reader_{dataset.name}_{team}",
                bucket=bucket.name,
                role="roles/storage.objectViewer",
                member=_member(account),
            )


class GlobalStack(TerraformStack):
    def __init__(self, scope: Construct, fleet: Fleet, backend: Backend) -> None:
        super().__init__(scope, "global")
        use_backend(self, fleet, "global", backend)
        GoogleProvider(self, "google", project=fleet.project.id, default_labels=labels(fleet, "global"))
        services = project_services(self)
        binary_authorization(self, fleet, services["binaryauthorization.googleapis.com"])
        networks = global_networks(self, fleet)
        accounts = role_accounts(self, fleet)
        teams = team_accounts(self, fleet)
        image_registry(self, fleet, accounts)
        workload_identity(self, fleet, accounts, teams)
        warden_role = ProjectIamCustomRole(
            self,
            "role_warden",
            role_id=f"{fleet.name.replace('-', '_')}_warden",
            title="Meridian Warden: repair GPU hosts",
            permissions=list(role_permissions()),  # derived from warden.gce's calls
        )
        dataset_buckets(self, fleet, teams)

        outputs = {name: network.id for name, network in networks.items()}
        outputs |= {f"{role}_service_account": account.email for role, account in accounts.items()}
        outputs |= {team_output(team): account.email for team, account in teams.items()}
        outputs["warden_role"] = warden_role.id
        for name, value in outputs.items():
            TerraformOutput(self, name, value=value, static_id=True)
