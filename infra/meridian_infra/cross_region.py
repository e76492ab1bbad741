"""The network path of a training run across regions (issue 19): who may reach this region's pods.

A run's regions talk over the cluster VPC's pod network: the RDMA VPCs are per GPU
zone, carry only RoCE and reach no other region, so the synchronization between
regions' replica groups goes pod IP to pod IP over the global cluster VPC (GKE's
ip-masq-agent does not masquerade RFC 1918 destinations, so the source is the
client pod's IP). Each region admits, from the other regions' pod ranges only:

- `<fleet>-<region>-cross-region`: TCP to this region's pod range, only the ports
  a run across regions serves other regions, each a named range of
  contract.names (CROSS_REGION_PORTS), as fleet's NetworkPolicy
  `run-across-regions` (fleet/gitops/netpol.py): LIGHTHOUSE_PORT (the
  Lighthouse's mTLS proxy, trainer/distributed/mtls.py), HEAL_TLS_PORTS (heal transfers
  over mTLS, trainer/ft/heal_tls.py), MANAGER_PORTS (torchft's Manager gRPC, which
  a group healing from another region dials: torchft 0.2.0 manager.py binds
  the `port=` it is given, which the Ray launcher picks per group,
  trainer/distributed/regions.py manager_port) and RING_TLS_PORTS (the all-reduce between
  regions over mTLS, trainer/distributed/tls_ring.py). The groups' TCPStores, gloo and
  NCCL sockets, torchft's plain heal server (port 0, unused with a TLS
  identity), metrics and Ray's ports are in none of them. Targets: the node
  service account (pod IPs are alias IPs of the node VMs; every pool, GPU and
  CPU, runs as it).
- `<fleet>-<region>-lighthouse`: TCP LIGHTHOUSE_PORT to this region's node
  range, where an internal passthrough load balancer's address comes from (the
  cluster subnet's primary range). Passthrough keeps the client's IP, so the
  backends see other regions' pod IPs arriving for the load balancer's address.
  Any region may be a run's home, so every region has it.

Both rules name every other region: adding a region to fleet.yaml updates every
region's rules (their sources), which the plan review shows. One region: no rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from ipaddress import IPv4Network

from cdktn_provider_google.compute_firewall import ComputeFirewallAllow
from constructs import Construct

from contract.names import CROSS_REGION_PORTS, LIGHTHOUSE_PORT
from fleet.model import Fleet
from fleet.planner import RegionRanges
from meridian_infra.network import firewall


def cross_region_firewalls(
    scope: Construct,
    fleet: Fleet,
    ranges: RegionRanges,
    peer_pods: Sequence[IPv4Network],
    network: str,
    nodes_account: str,
) -> None:
    """This region's two ingress rules for runs across regions; none when it has no peer."""
    if not peer_pods:
        return
    sources = [str(cidr) for cidr in peer_pods]
    prefix = f"{fleet.name}-{ranges.region}"
    firewall(
        scope,
        "fw_cross_region",
        f"{prefix}-cross-region",
        network,
        sources,
        ComputeFirewallAllow(protocol="tcp", ports=[_ports(r) for r in CROSS_REGION_PORTS]),
        destinations=[str(ranges.pods.cidr)],
        targets=[nodes_account],
    )
    firewall(
        scope,
        "fw_lighthouse",
        f"{prefix}-lighthouse",
        network,
        sources,
        ComputeFirewallAllow(protocol="tcp", ports=[str(LIGHTHOUSE_PORT)]),
        destinations=[str(ranges.nodes.cidr)],
        targets=[nodes_account],
    )


def _ports(ports: range) -> str:
    """A firewall rule's port or port range ("29520-29527")."""
    return f"{ports.start}-{ports.stop - 1}" if len(ports) > 1 else str(ports.start)
