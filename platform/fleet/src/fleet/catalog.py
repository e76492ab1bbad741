"""Facts about Google Cloud locations and machine types.

This is the one place, besides fleet.yaml, where such facts are written down.
Zone availability of GPU machine types is a snapshot (late 2026) of the
Compute Engine "GPU regions and zones" page; check it again with
`gcloud compute machine-types list --filter="name=a3-ultragpu-8g"` before
relying on a new zone.
"""

from __future__ import annotations

from dataclasses import dataclass

from contract.registry import Thresholds


@dataclass(frozen=True)
class MachineType:
    name: str
    vcpus: int
    memory_gb: int
    gpu_type: str | None = None  # GKE accelerator label value
    gpu_model: str = ""  # what people call it: H200
    gpus: int = 0
    gpu_memory_gb: int = 0
    rdma_nics: int = 0  # ConnectX NICs for GPU-to-GPU RDMA (one per GPU)
    gvnic_nics: int = 1  # host gVNIC NICs
    local_ssds: int = 0  # 375 GiB local SSDs, used as ephemeral storage
    # Preflight expectations (GB/s, TFLOPS): all-reduce bus bandwidth at large
    # messages within one node (NVLink) and across nodes (GPU NICs), and dense
    # bf16 matmul throughput per GPU at 8192x8192.
    allreduce_intra_gbps: float = 0.0
    allreduce_inter_gbps: float = 0.0
    matmul_tflops: float = 0.0
    # Dense bf16 tensor-core peak per GPU from the vendor's datasheet (half the "with sparsity"
    # figure): the denominator of MFU. H100 and H200 SXM: 1,979 TFLOPS sparse -> 989 dense.
    peak_bf16_tflops: float = 0.0
    # Zones where the type is offered; None means every zone of every region.
    zones: frozenset[str] | None = None

    @property
    def is_gpu(self) -> bool:
        return self.gpus > 0

    def offered_in(self, zone: str) -> bool:
        return self.zones is None or zone in self.zones


def _standard(family: str, vcpus: int, gb_per_vcpu: int) -> MachineType:
    return MachineType(name=f"{family}-standard-{vcpus}", vcpus=vcpus, memory_gb=vcpus * gb_per_vcpu)


MACHINE_TYPES: dict[str, MachineType] = {
    m.name: m
    for m in (
        MachineType(
            name="a3-ultragpu-8g",
            vcpus=224,
            memory_gb=2952,
            gpu_type="nvidia-h200-141gb",
            gpu_model="H200",
            gpus=8,
            gpu_memory_gb=141,
            rdma_nics=8,
            gvnic_nics=2,
            local_ssds=32,
            allreduce_intra_gbps=460,  # nccl-tests on 8 x H200 NVLink: 460-480 GB/s
            # No published multi-node nccl-tests busbw for a3-ultragpu-8g: gpu-recipes
            # training/a3ultra/nccl-tests/README.md and cluster-toolkit
            # examples/gke-a3-ultragpu/system_benchmarks/README.md print it as XXX.XX. Derived
            # instead from the published line rate: 8 CX-7 NICs x 400 Gb/s = 400 GB/s per node,
            # the ceiling of a ring all-reduce's busbw across nodes (each of the 8 rings crosses
            # one NIC), times 0.8, the low end of what NCCL over RDMA reaches at large messages.
            allreduce_inter_gbps=320,
            matmul_tflops=750,
            peak_bf16_tflops=989,
            zones=frozenset(
                {
                    "us-central1-b",
                    "us-east4-b",
                    "us-west1-c",
                    "europe-west1-b",
                    "asia-south1-b",
                    "asia-southeast1-b",
                }
            ),
        ),
        MachineType(
            name="a3-megagpu-8g",
            vcpus=208,
            memory_gb=1872,
            gpu_type="nvidia-h100-mega-80gb",
            gpu_model="H100",
            gpus=8,
            gpu_memory_gb=80,
            gvnic_nics=9,  # 8 GPUDirect-TCPXO NICs + 1 host NIC, no RDMA
            local_ssds=16,
            allreduce_intra_gbps=460,
            allreduce_inter_gbps=90,  # 8 x 200 Gb/s TCPXO
            matmul_tflops=700,
            peak_bf16_tflops=989,
            zones=frozenset(
                {
                    "us-central1-a",
                    "us-central1-c",
                    "us-east4-a",
                    "us-east5-a",
                    "us-west1-a",
                    "us-west4-a",
                    "europe-west4-b",
                    "europe-west4-c",
                    "asia-northeast1-b",
                    "asia-southeast1-c",
                }
            ),
        ),
        *(_standard("n2", n, 4) for n in (8, 16, 32, 48, 64)),
        *(_standard("e2", n, 4) for n in (4, 8, 16, 32)),
        *(_standard("c3", n, 4) for n in (22, 44, 88)),
    )
}

# Regions this fleet may use and their zones. A region missing here is
# rejected as unknown: add it (with its zones) when the fleet grows into it.
REGIONS: dict[str, tuple[str, ...]] = {
    name: tuple(f"{name}-{z}" for z in zones)
    for name, zones in (
        ("us-central1", "abcf"),
        ("us-east1", "bcd"),
        ("us-east4", "abc"),
        ("us-east5", "abc"),
        ("us-south1", "abc"),
        ("us-west1", "abc"),
        ("us-west4", "abc"),
        ("europe-west1", "bcd"),
        ("europe-west4", "abc"),
        ("europe-north1", "abc"),
        ("asia-south1", "abc"),
        ("asia-southeast1", "abc"),
        ("asia-northeast1", "abc"),
    )
}


# A measurement more than this share below expectation points at a problem (nccl-tests practice).
PREFLIGHT_TOLERANCE = 0.2


def thresholds(machine: MachineType) -> Thresholds:
    """What `preflight run` must measure on this machine: the catalog's figures less the tolerance."""
    keep = 1 - PREFLIGHT_TOLERANCE
    return Thresholds(
        gpus=machine.gpus,
        min_tflops=round(machine.matmul_tflops * keep, 3),
        min_busbw_one_node_gbps=round(machine.allreduce_intra_gbps * keep, 3),
        min_busbw_many_nodes_gbps=round(machine.allreduce_inter_gbps * keep, 3),
        rdma=machine.rdma_nics > 0,
    )


def pod_block_size(max_pods_per_node: int) -> int:
    """Addresses GKE reserves per node: the smallest power of two >= 2 x max pods."""
    size = 1
    while size < 2 * max_pods_per_node:
        size *= 2
    return size
