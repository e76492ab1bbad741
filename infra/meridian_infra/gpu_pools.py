"""GPU node pools as the spec describes them (A3 Ultra: 8 x H200, 1 gVNIC + 8 RDMA NICs).

How capacity is bought decides most settings (each checked against cluster-toolkit
modules/compute/gke-node-pool/main.tf preconditions and its A3 Ultra examples):

| mode        | size                | reservation          | placement | auto-repair | upgrades |
|-------------|---------------------|----------------------|-----------|-------------|----------|
| reservation | fixed               | SPECIFIC (`<reservation>/reservationBlocks/<block>` with a block) | the reservation's own | on | SURGE 0/1 |
| flex_start  | autoscaled 0..nodes, flex-start + queued provisioning | none | none (not with queued provisioning) | off (GKE requires it) | none set: GKE's short-lived upgrades |
| spot        | fixed               | none                 | COMPACT   | on          | SURGE 0/1 |
| on_demand   | fixed               | none                 | COMPACT   | on          | SURGE 0/1 |

Auto-upgrade is on for every pool: GKE refuses `auto_upgrade = false` on a cluster
enrolled in a release channel. Node upgrades are held off training capacity by the
cluster's maintenance exclusions (NO_MINOR_OR_NODE_UPGRADES until end of support)
and its maintenance window (cluster.py). cluster-toolkit's queued-provisioning
example sets auto_upgrade false only because its cluster has no release channel;
flex-start pools set no upgrade settings at all: GKE itself upgrades flex-start nodes
with short-lived upgrades (nodes are never upgraded in place, new nodes come up at the
current version; https://cloud.google.com/kubernetes-engine/docs/concepts/node-pool-upgrade-strategies,
"For nodes that use Flex-start VMs, GKE uses short-lived upgrades"), and the pinned
provider refuses the API's SHORT_LIVED value (PROVIDER_UPGRADE_STRATEGIES).
"""

from __future__ import annotations

from cdktn_provider_google.container_node_pool import (
    ContainerNodePool,
    ContainerNodePoolAutoscaling,
    ContainerNodePoolManagement,
    ContainerNodePoolNetworkConfig,
    ContainerNodePoolNetworkConfigAdditionalNodeNetworkConfigs,
    ContainerNodePoolNodeConfig,
    ContainerNodePoolNodeConfigEphemeralStorageLocalSsdConfig,
    ContainerNodePoolNodeConfigGuestAccelerator,
    ContainerNodePoolNodeConfigGuestAcceleratorGpuDriverInstallationConfig,
    ContainerNodePoolNodeConfigGvnic,
    ContainerNodePoolNodeConfigReservationAffinity,
    ContainerNodePoolNodeConfigTaint,
    ContainerNodePoolPlacementPolicy,
    ContainerNodePoolQueuedProvisioning,
    ContainerNodePoolUpgradeSettings,
)
from constructs import Construct

from fleet import names
from fleet.model import CapacityMode, GpuPool, Region
from meridian_infra.cluster import node_security
from meridian_infra.network import RegionNetworks

RESERVATION_KEY = "compute.googleapis.com/reservation-name"
GPU_DRIVER_VERSION = "LATEST"

# The values hashicorp/google (8.7.0, through cdktn-provider-google 21.1.0) accepts for
# google_container_node_pool.upgrade_settings.strategy: its schema validates
# StringInSlice(["SURGE", "BLUE_GREEN"]) (google/services/container/resource_container_node_pool.go,
# read on the provider's main branch and FEATURE-BRANCH-major-release-8.0.0, 2026-08; unchanged since
# 2023), so the API's SHORT_LIVED fails `terraform plan`. tests/infra checks every synthesized pool.
PROVIDER_UPGRADE_STRATEGIES = frozenset({"SURGE", "BLUE_GREEN"})


def reservation_affinity(pool: GpuPool) -> ContainerNodePoolNodeConfigReservationAffinity:
    capacity = pool.capacity
    if capacity.mode is not CapacityMode.RESERVATION:
        return ContainerNodePoolNodeConfigReservationAffinity(consume_reservation_type="NO_RESERVATION")
    value = str(capacity.reservation)
    if capacity.block:
        value = f"{value}/reservationBlocks/{capacity.block}"
    return ContainerNodePoolNodeConfigReservationAffinity(
        consume_reservation_type="SPECIFIC_RESERVATION", key=RESERVATION_KEY, values=[value]
    )


def upgrade_settings(mode: CapacityMode) -> ContainerNodePoolUpgradeSettings | None:
    if mode is CapacityMode.FLEX_START:
        # None: GKE applies short-lived upgrades to flex-start nodes itself; the block is optional
        # and computed in the provider, so GKE's own setting shows no diff.
        return None
    # No spare GPUs to surge into: replace one node at a time (cluster-toolkit gke-node-pool defaults 0/1).
    return ContainerNodePoolUpgradeSettings(strategy="SURGE", max_surge=0, max_unavailable=1)


def additional_networks(
    pool: GpuPool, networks: RegionNetworks
) -> list[ContainerNodePoolNetworkConfigAdditionalNodeNetworkConfigs]:
    """eth1 on the gVNIC network, then eth2..eth9 on the zone's 8 RDMA subnets."""
    # By name, as cluster-toolkit modules/network/gpu-rdma-vpc outputs `subnetwork_interfaces_gke`:
    # an id or self link spelled differently by the API would make every plan replace the pool.
    # Subnet `.name` references keep Terraform's order (networks and subnets before pools).
    nics = [(networks.gvnic_network_name, networks.gvnic_subnet.name)]
    if pool.machine.rdma_nics:
        rdma_network, subnets = networks.rdma[pool.zone]
        nics += [(rdma_network.name, subnet.name) for subnet in subnets]
    return [ContainerNodePoolNetworkConfigAdditionalNodeNetworkConfigs(network=n, subnetwork=s) for n, s in nics]


def gpu_pool(
    scope: Construct, region: Region, pool: GpuPool, cluster_id: str, networks: RegionNetworks, nodes_account: str
) -> ContainerNodePool:
    machine = pool.machine
    mode = pool.capacity.mode
    flex = mode is CapacityMode.FLEX_START
    labels = {names.POOL_LABEL: pool.name, names.TEAM_LABEL: pool.team or "shared"}
    return ContainerNodePool(
        scope,
        f"pool_{pool.name}",
        name=pool.name,
        cluster=cluster_id,
        location=region.name,
        node_locations=[pool.zone],
        node_count=None if flex else pool.nodes,
        initial_node_count=0 if flex else None,  # queued provisioning starts empty (cluster-toolkit precondition)
        autoscaling=ContainerNodePoolAutoscaling(
            total_min_node_count=0, total_max_node_count=pool.nodes, location_policy="ANY"
        )
        if flex
        else None,
        queued_provisioning=ContainerNodePoolQueuedProvisioning(enabled=True) if flex else None,
        placement_policy=ContainerNodePoolPlacementPolicy(type="COMPACT")
        if mode in (CapacityMode.SPOT, CapacityMode.ON_DEMAND)
        else None,
        max_pods_per_node=pool.max_pods_per_node,
        management=ContainerNodePoolManagement(auto_repair=not flex, auto_upgrade=True),
        upgrade_settings=upgrade_settings(mode),
        network_config=ContainerNodePoolNetworkConfig(
            enable_private_nodes=True, additional_node_network_configs=additional_networks(pool, networks)
        ),
        node_config=ContainerNodePoolNodeConfig(
            machine_type=machine.name,
            image_type="COS_CONTAINERD",
            disk_type="hyperdisk-balanced",
            disk_size_gb=500,
            guest_accelerator=[
                ContainerNodePoolNodeConfigGuestAccelerator(
                    type=str(machine.gpu_type),
                    count=machine.gpus,
                    gpu_driver_installation_config=ContainerNodePoolNodeConfigGuestAcceleratorGpuDriverInstallationConfig(
                        gpu_driver_version=GPU_DRIVER_VERSION
                    ),
                )
            ],
            gvnic=ContainerNodePoolNodeConfigGvnic(enabled=True),
            ephemeral_storage_local_ssd_config=ContainerNodePoolNodeConfigEphemeralStorageLocalSsdConfig(
                local_ssd_count=machine.local_ssds
            ),
            reservation_affinity=reservation_affinity(pool),
            spot=True if mode is CapacityMode.SPOT else None,
            flex_start=True
            if flex
            else None,  # with queued provisioning: GKE docs, cluster-toolkit dws-flex-start-queued-provisioning
            taint=[ContainerNodePoolNodeConfigTaint(key=names.GPU_TAINT_KEY, value="present", effect="NO_SCHEDULE")],
            labels=labels,
            **node_security(nodes_account),
        ),
    )
