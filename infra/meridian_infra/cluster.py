"""A region's GKE cluster and its CPU system pool.

Regional control plane, private nodes, Dataplane V2 with multi-networking
(for the GPU NICs), Workload Identity, GCS FUSE CSI, managed Prometheus with
DCGM metrics, shielded nodes, and no default node pool.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from cdktn_provider_google.container_cluster import (
    ContainerCluster,
    ContainerClusterAddonsConfig,
    ContainerClusterAddonsConfigDnsCacheConfig,
    ContainerClusterAddonsConfigGcePersistentDiskCsiDriverConfig,
    ContainerClusterAddonsConfigGcsFuseCsiDriverConfig,
    ContainerClusterAuthenticatorGroupsConfig,
    ContainerClusterBinaryAuthorization,
    ContainerClusterControlPlaneEndpointsConfig,
    ContainerClusterControlPlaneEndpointsConfigDnsEndpointConfig,
    ContainerClusterCostManagementConfig,
    ContainerClusterIpAllocationPolicy,
    ContainerClusterLoggingConfig,
    ContainerClusterMaintenancePolicy,
    ContainerClusterMaintenancePolicyMaintenanceExclusion,
    ContainerClusterMaintenancePolicyMaintenanceExclusionExclusionOptions,
    ContainerClusterMaintenancePolicyRecurringWindow,
    ContainerClusterMasterAuth,
    ContainerClusterMasterAuthClientCertificateConfig,
    ContainerClusterMasterAuthorizedNetworksConfig,
    ContainerClusterMonitoringConfig,
    ContainerClusterMonitoringConfigManagedPrometheus,
    ContainerClusterPrivateClusterConfig,
    ContainerClusterPrivateClusterConfigMasterGlobalAccessConfig,
    ContainerClusterReleaseChannel,
    ContainerClusterWorkloadIdentityConfig,
)
from cdktn_provider_google.container_node_pool import (
    ContainerNodePool,
    ContainerNodePoolAutoscaling,
    ContainerNodePoolManagement,
    ContainerNodePoolNodeConfig,
    ContainerNodePoolNodeConfigShieldedInstanceConfig,
    ContainerNodePoolNodeConfigWorkloadMetadataConfig,
    ContainerNodePoolUpgradeSettings,
)
from constructs import Construct

from fleet import names
from fleet.model import CpuPool, Exclusion, Fleet, MaintenanceWindow, Region
from fleet.planner import RegionRanges
from meridian_infra.network import POD_RANGE, SERVICE_RANGE, RegionNetworks

# A fixed first occurrence: GKE repeats the window by its RRULE from here.
_WINDOW_EPOCH = datetime(2026, 1, 1)

SYSTEM_POOL = names.SYSTEM_POOL
OAUTH_SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]  # access is decided by IAM


def recurring_window(window: MaintenanceWindow) -> ContainerClusterMaintenancePolicyRecurringWindow:
    hours, minutes = (int(x) for x in window.start_utc.split(":"))
    start = _WINDOW_EPOCH + timedelta(hours=hours, minutes=minutes)
    end = start + timedelta(hours=window.hours)
    return ContainerClusterMaintenancePolicyRecurringWindow(
        start_time=f"{start:%Y-%m-%dT%H:%M:%SZ}",
        end_time=f"{end:%Y-%m-%dT%H:%M:%SZ}",
        recurrence=f"FREQ=WEEKLY;BYDAY={','.join(d.value for d in window.days)}",
    )


def maintenance_exclusion(e: Exclusion) -> ContainerClusterMaintenancePolicyMaintenanceExclusion:
    """Without an end, the exclusion lasts until the minor's end of support (GKE's
    UNTIL_END_OF_SUPPORT), as cluster-toolkit examples/gke-a3-ultragpu/gke-a3-ultragpu.yaml
    holds node upgrades off A3 Ultra capacity; GKE takes either an end time or that behavior."""
    return ContainerClusterMaintenancePolicyMaintenanceExclusion(
        exclusion_name=e.name,
        start_time=_rfc3339(e.start),
        end_time=_rfc3339(e.end) if e.end else None,
        exclusion_options=ContainerClusterMaintenancePolicyMaintenanceExclusionExclusionOptions(
            scope=e.scope, end_time_behavior=None if e.end else "UNTIL_END_OF_SUPPORT"
        ),
    )


def _rfc3339(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def control_plane_version(fleet: Fleet) -> str:
    """The control plane's minimum, fleet.yaml's minor ("1.35"): a literal, so this floor moves only with fleet.yaml.

    A floor, not a pin: the provider documents min_master_version as "the minimum version of the master.
    GKE will auto-update the master to new versions" (registry.terraform.io, google_container_cluster). What
    holds the control plane on the minor is the cluster's NO_MINOR_OR_NODE_UPGRADES maintenance exclusion
    (maintenance_exclusion above); without it the release channel upgrades past the floor.
    GKE takes a minor as a version alias (the channel's default patch of it), and the provider upgrades
    the control plane only when min_master_version rises above the running version
    (resource_container_cluster.go: "Only upgrade the master if the current version is lower than the
    desired version"); patches within the minor come from the release channel, inside the maintenance
    window. A lookup of the newest patch in a google_container_engine_versions data source (as before)
    changes whenever Google publishes one, so any apply upgraded every control plane at once;
    cluster-toolkit modules/scheduler/gke-cluster/main.tf guards the same data-source value with
    `lifecycle { ignore_changes = [min_master_version] }`, which would also ignore fleet.yaml's minor.
    """
    return fleet.versions.kubernetes


def _networking(ranges: RegionRanges, main_network: str, networks: RegionNetworks) -> dict[str, Any]:
    """VPC-native in the region's subnet, private nodes, the API reached through its DNS endpoint."""
    return {
        "network": main_network,
        "subnetwork": networks.subnet.id,
        "networking_mode": "VPC_NATIVE",
        "ip_allocation_policy": ContainerClusterIpAllocationPolicy(
            cluster_secondary_range_name=POD_RANGE, services_secondary_range_name=SERVICE_RANGE
        ),
        "private_cluster_config": ContainerClusterPrivateClusterConfig(
            enable_private_nodes=True,
            enable_private_endpoint=False,
            master_ipv4_cidr_block=str(ranges.control_plane.cidr),
            master_global_access_config=ContainerClusterPrivateClusterConfigMasterGlobalAccessConfig(enabled=True),
        ),
        # No IP allowlist beyond the VPC: people reach the API through the
        # IAM-checked DNS endpoint; in-cluster agents use the private endpoint.
        "master_authorized_networks_config": ContainerClusterMasterAuthorizedNetworksConfig(
            gcp_public_cidrs_access_enabled=False
        ),
        "control_plane_endpoints_config": ContainerClusterControlPlaneEndpointsConfig(
            dns_endpoint_config=ContainerClusterControlPlaneEndpointsConfigDnsEndpointConfig(
                allow_external_traffic=True
            )
        ),
        "datapath_provider": "ADVANCED_DATAPATH",  # Dataplane V2: enforces NetworkPolicy itself
        "enable_multi_networking": True,
    }


def _identity(fleet: Fleet) -> dict[str, Any]:
    """Who may do what: no client certificates, Google groups in RBAC, Binary Authorization, Workload Identity."""
    return {
        "master_auth": ContainerClusterMasterAuth(
            client_certificate_config=ContainerClusterMasterAuthClientCertificateConfig(issue_client_certificate=False)
        ),
        # Kubernetes RBAC may name Google groups (team namespaces bind their teams' groups).
        "authenticator_groups_config": ContainerClusterAuthenticatorGroupsConfig(
            security_group=fleet.project.gke_security_group
        ),
        # Enforce the project's Binary Authorization policy on every image.
        "binary_authorization": ContainerClusterBinaryAuthorization(evaluation_mode="PROJECT_SINGLETON_POLICY_ENFORCE"),
        "workload_identity_config": ContainerClusterWorkloadIdentityConfig(workload_pool=names.workload_pool(fleet)),
    }


def _addons() -> dict[str, Any]:
    """GCS FUSE and PD CSI drivers, the node-local DNS cache, managed Prometheus with DCGM metrics, logs."""
    return {
        "addons_config": ContainerClusterAddonsConfig(
            gcs_fuse_csi_driver_config=ContainerClusterAddonsConfigGcsFuseCsiDriverConfig(enabled=True),
            gce_persistent_disk_csi_driver_config=ContainerClusterAddonsConfigGcePersistentDiskCsiDriverConfig(
                enabled=True
            ),
            dns_cache_config=ContainerClusterAddonsConfigDnsCacheConfig(enabled=True),
        ),
        "monitoring_config": ContainerClusterMonitoringConfig(
            enable_components=["SYSTEM_COMPONENTS", "DCGM", "KUBELET", "CADVISOR", "POD", "DEPLOYMENT", "DAEMONSET"],
            managed_prometheus=ContainerClusterMonitoringConfigManagedPrometheus(enabled=True),
        ),
        "logging_config": ContainerClusterLoggingConfig(enable_components=["SYSTEM_COMPONENTS", "WORKLOADS"]),
    }


def cluster(
    scope: Construct, fleet: Fleet, region: Region, ranges: RegionRanges, main_network: str, networks: RegionNetworks
) -> ContainerCluster:
    spec = region.cluster
    exclusions = [maintenance_exclusion(e) for e in spec.maintenance_exclusions]
    return ContainerCluster(
        scope,
        "cluster",
        name=fleet.cluster_name(region),
        location=region.name,  # regional control plane
        node_locations=list(region.zones),
        **_networking(ranges, main_network, networks),
        **_identity(fleet),
        enable_shielded_nodes=True,
        remove_default_node_pool=True,
        initial_node_count=1,
        deletion_protection=True,
        **_addons(),
        release_channel=ContainerClusterReleaseChannel(channel=fleet.release_channel(region).value),
        min_master_version=control_plane_version(fleet),
        # A run's Lighthouse is an internal passthrough load balancer. Without GKE subsetting its backend
        # is an instance group of every node, at most 250 (GKE, "Create an internal load balancer":
        # "By default, GKE subsetting is disabled, which limits the backend service to distributing up to
        # 250 or fewer backend node VMs"); GPU pools alone exceed that. On for every cluster, not only the
        # large ones: it "cannot be disabled once it has been enabled", so a threshold would fail the
        # plan of a cluster that shrinks back.
        enable_l4_ilb_subsetting=True,
        maintenance_policy=ContainerClusterMaintenancePolicy(
            recurring_window=recurring_window(spec.maintenance_window), maintenance_exclusion=exclusions or None
        ),
        cost_management_config=ContainerClusterCostManagementConfig(enabled=True),
        resource_labels={"region": region.name},
    )


def node_security(nodes_account: str) -> dict[str, Any]:
    """Identity and hardening every node pool gets: the node service account,
    the GKE metadata server (Workload Identity), shielded boot, no legacy metadata."""
    return {
        "service_account": nodes_account,
        "oauth_scopes": OAUTH_SCOPES,
        "workload_metadata_config": ContainerNodePoolNodeConfigWorkloadMetadataConfig(mode="GKE_METADATA"),
        "shielded_instance_config": ContainerNodePoolNodeConfigShieldedInstanceConfig(
            enable_secure_boot=True, enable_integrity_monitoring=True
        ),
        "metadata": {"disable-legacy-endpoints": "true"},
    }


def _cpu_node_pool(
    scope: Construct, name: str, region: Region, cluster_id: str, nodes_account: str, machine_type: str,
    max_pods_per_node: int, **size: Any,
) -> ContainerNodePool:  # fmt: skip
    """A CPU node pool across the region's zones; `size` is its node count or autoscaling."""
    return ContainerNodePool(
        scope,
        f"pool_{name}",
        name=name,
        cluster=cluster_id,
        location=region.name,
        node_locations=list(region.zones),
        max_pods_per_node=max_pods_per_node,
        management=ContainerNodePoolManagement(auto_repair=True, auto_upgrade=True),
        upgrade_settings=ContainerNodePoolUpgradeSettings(strategy="SURGE", max_surge=1, max_unavailable=0),
        node_config=ContainerNodePoolNodeConfig(
            machine_type=machine_type,
            image_type="COS_CONTAINERD",
            disk_type="pd-balanced",
            disk_size_gb=100,
            labels={names.POOL_LABEL: name},
            **node_security(nodes_account),
        ),
        **size,
    )


def system_pool(
    scope: Construct, fleet: Fleet, region: Region, cluster_id: str, nodes_account: str
) -> ContainerNodePool:
    """CPU nodes for the platform's own services (operators, Warden, Argo CD)."""
    pool = region.system_pool
    return _cpu_node_pool(
        scope, SYSTEM_POOL, region, cluster_id, nodes_account, pool.machine_type, pool.max_pods_per_node,
        node_count=pool.nodes_per_zone,
    )  # fmt: skip


def cpu_pool(scope: Construct, region: Region, pool: CpuPool, cluster_id: str, nodes_account: str) -> ContainerNodePool:
    """Autoscaled CPU workers (Ray heads, CPU-only jobs) across the region's zones; never on H200 nodes."""
    return _cpu_node_pool(
        scope, pool.name, region, cluster_id, nodes_account, pool.machine_type, pool.max_pods_per_node,
        autoscaling=ContainerNodePoolAutoscaling(
            total_min_node_count=pool.min_nodes, total_max_node_count=pool.max_nodes, location_policy="BALANCED"
        ),
    )  # fmt: skip
