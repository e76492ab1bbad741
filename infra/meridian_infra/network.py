"""A region's networking: subnets from the address plan, NAT, firewall, GPU networks.

The cluster VPC and the gVNIC VPC are global (global stack); their regional
subnets are here. Each GPU zone gets its own RDMA VPC, created on the zone's
RoCE network profile with one subnet per ConnectX NIC.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdktn_provider_google.compute_firewall import ComputeFirewall, ComputeFirewallAllow, ComputeFirewallLogConfig
from cdktn_provider_google.compute_network import ComputeNetwork
from cdktn_provider_google.compute_router import ComputeRouter
from cdktn_provider_google.compute_router_nat import (
    ComputeRouterNat,
    ComputeRouterNatLogConfig,
    ComputeRouterNatSubnetwork,
)
from cdktn_provider_google.compute_subnetwork import (
    ComputeSubnetwork,
    ComputeSubnetworkLogConfig,
    ComputeSubnetworkSecondaryIpRange,
)
from constructs import Construct

from fleet import names
from fleet.model import Fleet, Region
from fleet.planner import RegionRanges
from meridian_infra.common import MTU

POD_RANGE = "pods"
SERVICE_RANGE = "services"
# Google's health checkers and the IAP range, as GKE documents them.
HEALTH_CHECK_RANGES = ("35.191.0.0/16", "130.211.0.0/22")
# Ports the GKE control plane uses to reach nodes: kubelet, webhooks.
CONTROL_PLANE_PORTS = ("443", "8443", "9443", "10250", "15017")

_FLOW_LOGS = ComputeSubnetworkLogConfig(
    aggregation_interval="INTERVAL_10_MIN", flow_sampling=0.1, metadata="INCLUDE_ALL_METADATA"
)


@dataclass(frozen=True)
class RegionNetworks:
    subnet: ComputeSubnetwork
    gvnic_subnet: ComputeSubnetwork
    gvnic_network_name: str  # the global gVNIC VPC, by name (node pools take names)
    rdma: dict[str, tuple[ComputeNetwork, list[ComputeSubnetwork]]]  # GPU zone -> VPC, 8 subnets


def subnet(
    scope: Construct,
    id_: str,
    name: str,
    region: str,
    network: str,
    cidr: str,
    secondary: list[ComputeSubnetworkSecondaryIpRange] | None = None,
) -> ComputeSubnetwork:
    """A node subnet: private Google access, flow logs sampled."""
    return ComputeSubnetwork(
        scope,
        id_,
        name=name,
        region=region,
        network=network,
        ip_cidr_range=cidr,
        secondary_ip_range=secondary,
        private_ip_google_access=True,
        log_config=_FLOW_LOGS,
    )


def nat(scope: Construct, fleet: Fleet, region: Region, network: str, nodes: ComputeSubnetwork) -> None:
    """Private nodes reach the internet (image pulls outside Google, pip) only through NAT."""
    router = ComputeRouter(scope, "router", name=f"{fleet.name}-{region.name}", region=region.name, network=network)
    ComputeRouterNat(
        scope,
        "nat",
        name=f"{fleet.name}-{region.name}",
        router=router.name,
        region=region.name,
        nat_ip_allocate_option="AUTO_ONLY",
        source_subnetwork_ip_ranges_to_nat="LIST_OF_SUBNETWORKS",
        subnetwork=[ComputeRouterNatSubnetwork(name=nodes.id, source_ip_ranges_to_nat=["ALL_IP_RANGES"])],
        enable_dynamic_port_allocation=True,
        log_config=ComputeRouterNatLogConfig(enable=True, filter="ERRORS_ONLY"),
    )


def region_firewalls(
    scope: Construct, fleet: Fleet, region: Region, ranges: RegionRanges, main_network: str, gvnic_network: str
) -> None:
    """The region's own rules: its cluster's ranges among themselves, the control plane, Google's health checks,
    and gVNIC traffic inside the region."""
    cluster_ranges = [str(ranges.nodes.cidr), str(ranges.pods.cidr), str(ranges.services.cidr)]
    rules = (  # name suffix, network, sources, what they may reach
        ("internal", main_network, cluster_ranges, ComputeFirewallAllow(protocol="all")),
        (
            "control-plane",
            main_network,
            [str(ranges.control_plane.cidr)],
            ComputeFirewallAllow(protocol="tcp", ports=list(CONTROL_PLANE_PORTS)),
        ),
        ("health-checks", main_network, list(HEALTH_CHECK_RANGES), ComputeFirewallAllow(protocol="tcp")),
        ("gvnic-internal", gvnic_network, [str(ranges.gvnic.cidr)], ComputeFirewallAllow(protocol="all")),
    )
    for suffix, network, sources, allow in rules:
        firewall(
            scope, f"fw_{suffix.replace('-', '_')}", f"{fleet.name}-{region.name}-{suffix}", network, sources, allow
        )


def rdma_networks(
    scope: Construct, fleet: Fleet, region: Region, ranges: RegionRanges
) -> dict[str, tuple[ComputeNetwork, list[ComputeSubnetwork]]]:
    """GPU zone -> its RDMA VPC and one subnet per NIC. RDMA VPCs carry only RoCE traffic between GPU NICs;
    they take no firewall rules."""
    rdma: dict[str, tuple[ComputeNetwork, list[ComputeSubnetwork]]] = {}
    for zone, zone_ranges in ranges.rdma.items():
        network = ComputeNetwork(
            scope,
            f"rdma_{zone}",
            name=names.rdma_network(fleet, zone),
            auto_create_subnetworks=False,
            mtu=MTU,
            network_profile=names.roce_profile(fleet, zone),
        )
        subnets = [
            ComputeSubnetwork(
                scope,
                f"rdma_{zone}_{index}",
                name=names.rdma_subnet(fleet, zone, index),
                region=region.name,
                network=network.id,
                ip_cidr_range=str(assigned.cidr),
            )
            for index, assigned in enumerate(zone_ranges)
        ]
        rdma[zone] = (network, subnets)
    return rdma


def region_networks(
    scope: Construct, fleet: Fleet, region: Region, ranges: RegionRanges, main_network: str, gvnic_network: str
) -> RegionNetworks:
    pods_and_services = [
        ComputeSubnetworkSecondaryIpRange(range_name=POD_RANGE, ip_cidr_range=str(ranges.pods.cidr)),
        ComputeSubnetworkSecondaryIpRange(range_name=SERVICE_RANGE, ip_cidr_range=str(ranges.services.cidr)),
    ]
    nodes, gvnic = (
        subnet(scope, id_, name, region.name, network, str(cidr), secondary)
        for id_, name, network, cidr, secondary in (
            ("subnet", names.region_subnet(fleet, region.name), main_network, ranges.nodes.cidr, pods_and_services),
            ("gvnic_subnet", names.gvnic_subnet(fleet, region.name), gvnic_network, ranges.gvnic.cidr, None),
        )
    )
    nat(scope, fleet, region, main_network, nodes)
    region_firewalls(scope, fleet, region, ranges, main_network, gvnic_network)
    rdma = rdma_networks(scope, fleet, region, ranges)
    return RegionNetworks(nodes, gvnic, names.gvnic_network(fleet), rdma)


def firewall(
    scope: Construct,
    id_: str,
    name: str,
    network: str,
    sources: list[str],
    allow: ComputeFirewallAllow,
    destinations: list[str] | None = None,
    targets: list[str] | None = None,
) -> None:
    """An ingress allow rule, logged; `targets` are service accounts (none: every instance)."""
    ComputeFirewall(
        scope,
        id_,
        name=name,
        network=network,
        direction="INGRESS",
        source_ranges=sources,
        destination_ranges=destinations,
        target_service_accounts=targets,
        allow=[allow],
        log_config=ComputeFirewallLogConfig(metadata="EXCLUDE_ALL_METADATA"),
    )
