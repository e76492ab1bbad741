"""GKE multi-networking objects for A3 Ultra: the gVNIC network and the 8 RDMA networks."""

from __future__ import annotations

from fleet import names
from fleet.gitops.objects import Obj, obj
from fleet.model import Fleet, Region
from fleet.planner import RDMA_SUBNETS, rdma_zones

API = "networking.gke.io/v1"


def _network(name: str, vpc: str, subnet: str, mode: str) -> list[Obj]:
    return [
        obj(API, "GKENetworkParamSet", name, spec={"vpc": vpc, "vpcSubnet": subnet, "deviceMode": mode}),
        obj(
            API,
            "Network",
            name,
            spec={
                "type": "Device",
                "parametersRef": {"group": "networking.gke.io", "kind": "GKENetworkParamSet", "name": name},
            },
        ),
    ]


def network_objects(fleet: Fleet, region: Region) -> list[Obj]:
    zones = rdma_zones(region)
    if not zones:
        return []
    objects = _network(
        names.GVNIC_NETWORK_OBJECT, names.gvnic_network(fleet), names.gvnic_subnet(fleet, region.name), "NetDevice"
    )
    zone = zones[0]  # the rules allow A3 Ultra pools in one zone per region
    for index in range(RDMA_SUBNETS):
        objects += _network(
            names.rdma_network_object(index),
            names.rdma_network(fleet, zone),
            names.rdma_subnet(fleet, zone, index),
            "RDMA",
        )
    return objects
