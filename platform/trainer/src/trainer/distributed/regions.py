"""A run across regions: one Lighthouse for the whole run, one launcher (a RayJob) per region. Pure choices.

Replica ids carry the region, so groups of different regions never collide in the Lighthouse's quorum.
Inside a group, FSDP2 stays on NCCL (RDMA through the gIB plugin on GPU); across groups, torchft's
Manager all-reduces over its own process group, and a run that spans regions must not use NCCL there:
the RDMA networks are per zone, and NCCL with the gIB plugin (``NCCL_NET=gIB``, set by every GPU
container's prelude: REFERENCE.md, gpu-recipes a3ultra) would try them. Gloo goes over the pod network
(TCP on eth0) instead, and takes CUDA tensors: torchft's ``ProcessGroupGloo`` registers its gloo backend
for the cuda device too, and gloo's all_reduce supports GPU tensors (PyTorch's distributed docs,
"Backends"), staging them through host memory.
"""

from __future__ import annotations

from typing import Literal

from contract.names import MANAGER_PORTS
from trainer.config import Config

# The pod network's interface: GKE multi-network pods have the default network on eth0
# (networking.gke.io/default-interface), gVNIC on eth1, RDMA on eth2..eth9 (REFERENCE.md).
POD_INTERFACE = "eth0"


def replica_id(cfg: Config, group: int) -> str:
    """The group's id in the Lighthouse's quorum: "<region>/<group>" when regions share it, else "<run>-<group>".

    torchft appends a fresh uuid per Manager, and reads the id's trailing digits as the group's index
    (its flight-recorder dump path and the process group's debug labels only): groups of two regions
    may share that index, nothing else.
    """
    return f"{cfg.ft.region}/{group}" if cfg.ft.region else f"{cfg.run.name}-{group}"


def cross_group_backend(cfg: Config) -> Literal["gloo", "nccl"]:
    """The backend of torchft's cross-group process group (the config refuses nccl on CPU)."""
    if cfg.ft.device == "cpu":
        return "gloo"
    if cfg.ft.cross_group_backend == "auto":
        return "gloo" if cfg.ft.region else "nccl"
    return cfg.ft.cross_group_backend


def cross_group_environment(cfg: Config) -> dict[str, str]:
    """Environment the cross-group process group needs, where the pod's own does not set it.

    Gloo on a GPU pod binds the interface its hostname resolves to unless told: name the pod network's,
    never an RDMA NIC (GLOO_SOCKET_IFNAME, PyTorch's distributed docs, "Common environment variables").
    """
    if cfg.ft.device == "cuda" and cross_group_backend(cfg) == "gloo":
        return {"GLOO_SOCKET_IFNAME": POD_INTERFACE}
    return {}


def manager_port(cfg: Config, slot: int) -> int:
    """The port of the torchft Manager (gRPC) of the group in ``slot`` of its node (ray_supervisor.node_slot).

    A run across regions (a TLS identity): MANAGER_PORTS[slot], which the cross-region network rules name: a group
    healing from one in another region dials the source's Manager. Otherwise, or past the slots an 8-GPU node
    needs (CPU nodes hold more groups), 0: the config's ft.manager_port, whose default 0 is any free port.
    """
    if cfg.ft.lighthouse_tls and slot < len(MANAGER_PORTS):
        return MANAGER_PORTS[slot]
    return 0 if cfg.ft.lighthouse_tls else cfg.ft.manager_port
