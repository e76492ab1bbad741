"""One stack per region: its networks, cluster, node pools, checkpoint bucket and grants.

`cdktn deploy <region>` changes this region and nothing else; what it needs
from `global` (networks, service accounts, the warden role) comes through
remote state. `peer_pods` (the other regions' pod ranges) feed only the
cross-region firewall rules, which is why adding a region updates every region.
"""

from __future__ import annotations

from collections.abc import Sequence
from ipaddress import IPv4Network

from cdktn import TerraformOutput, TerraformStack
from cdktn_provider_google.project_iam_member import ProjectIamMember, ProjectIamMemberCondition
from cdktn_provider_google.provider import GoogleProvider
from cdktn_provider_google.storage_bucket import (
    StorageBucket,
    StorageBucketLifecycleRule,
    StorageBucketLifecycleRuleAction,
    StorageBucketLifecycleRuleCondition,
)
from cdktn_provider_google.storage_managed_folder import StorageManagedFolder
from cdktn_provider_google.storage_managed_folder_iam_member import StorageManagedFolderIamMember
from constructs import Construct

from fleet import names
from fleet.model import Fleet, Region
from fleet.planner import RegionRanges
from meridian_infra.backend import Backend, remote_state, use_backend
from meridian_infra.cluster import cluster, cpu_pool, system_pool
from meridian_infra.common import labels, private_bucket
from meridian_infra.cross_region import cross_region_firewalls
from meridian_infra.global_stack import team_output
from meridian_infra.gpu_pools import gpu_pool
from meridian_infra.network import region_networks


def checkpoint_bucket(scope: Construct, fleet: Fleet, region: Region, team_accounts: dict[str, str]) -> StorageBucket:
    """Checkpoints: one managed folder per team (teams/<team>/), staged data expires, committed
    checkpoints are kept until deleted on purpose.

    A team's account (`team_accounts`: team -> email) gets object access on its own managed folder and
    nothing on the bucket: a managed folder's policy covers the objects named under it, listing included,
    which a bucket-level grant with a resource.name prefix condition does not (list is a bucket call).
    """
    bucket = private_bucket(
        scope,
        "checkpoints",
        fleet.buckets.checkpoint_bucket(region.name),
        region.name,
        lifecycle=[
            StorageBucketLifecycleRule(
                condition=StorageBucketLifecycleRuleCondition(
                    age=fleet.buckets.staged_retention_days,
                    matches_prefix=[names.team_prefix(t.name) + names.STAGED_PREFIX for t in fleet.teams],
                ),
                action=StorageBucketLifecycleRuleAction(type="Delete"),
            )
        ],
    )
    for team in fleet.teams:
        folder = StorageManagedFolder(
            scope, f"checkpoints_{team.name}", bucket=bucket.name, name=names.team_prefix(team.name)
        )
        StorageManagedFolderIamMember(
            scope,
            f"checkpoints_{team.name}_user",
            bucket=bucket.name,
            managed_folder=folder.name,
            role="roles/storage.objectUser",
            member=f"serviceAccount:{team_accounts[team.name]}",
        )
    return bucket


def warden_repair(scope: Construct, fleet: Fleet, region: Region, role: str, account: str) -> None:
    """Warden repairs hosts only in this region's zones."""
    project = fleet.project.id
    zones = " || ".join(f'resource.name.startsWith("projects/{project}/zones/{zone}/")' for zone in region.zones)
    ProjectIamMember(
        scope,
        "warden_repair",
        project=project,
        role=role,
        member=f"serviceAccount:{account}",
        condition=ProjectIamMemberCondition(title=f"warden-{region.name}", expression=zones),
    )


class RegionStack(TerraformStack):
    def __init__(
        self,
        scope: Construct,
        fleet: Fleet,
        region: Region,
        ranges: RegionRanges,
        backend: Backend,
        peer_pods: Sequence[IPv4Network],
    ) -> None:
        super().__init__(scope, region.name)
        use_backend(self, fleet, region.name, backend)
        GoogleProvider(
            self, "google", project=fleet.project.id, region=region.name, default_labels=labels(fleet, region.name)
        )
        shared = remote_state(self, fleet, "global", backend)
        main_network = shared.get_string("main_network")
        nodes_account = shared.get_string("nodes_service_account")

        networks = region_networks(self, fleet, region, ranges, main_network, shared.get_string("gvnic_network"))
        # Runs across regions: the other regions' pods may reach this region's (cross_region.py).
        cross_region_firewalls(self, fleet, ranges, peer_pods, main_network, nodes_account)
        gke = cluster(self, fleet, region, ranges, main_network, networks)
        system_pool(self, fleet, region, gke.id, nodes_account)
        for pool in region.gpu_pools:
            gpu_pool(self, region, pool, gke.id, networks, nodes_account)
        for cpu in region.cpu_pools:
            cpu_pool(self, region, cpu, gke.id, nodes_account)
        teams = {t.name: shared.get_string(team_output(t.name)) for t in fleet.teams}
        bucket = checkpoint_bucket(self, fleet, region, teams)
        warden_repair(
            self, fleet, region, shared.get_string("warden_role"), shared.get_string("warden_service_account")
        )

        TerraformOutput(self, "cluster_name", value=gke.name, static_id=True)
        TerraformOutput(self, "checkpoint_bucket", value=bucket.name, static_id=True)
