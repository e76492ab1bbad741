"""What a job tool needs to know about the fleet: written by `make generate`, read by gkr.

fleet computes it once from fleet.yaml (its model, address and quota plans)
and writes `generated/registry.json`; the same document is published in each
cluster as the ConfigMap REGISTRY_CONFIGMAP, so a gkr installed outside the
repository can fetch it. Numbers only: nothing here is recomputed by a reader.
"""

from __future__ import annotations

from dataclasses import dataclass

from contract import codec

SCHEMA = "meridian.registry/v1"
FILE = "registry.json"  # in the generated folder, and the key of the ConfigMap
SCHEMAS_DIR = "schemas"  # beside it: the CRD schemas a job tool validates its manifests against
GENERATED_DIR = "generated"  # at the repository root: everything `make generate` writes for the tools
REGISTRY_CONFIGMAP = "meridian-registry"  # data: {FILE: the registry}; binaryData: {schema_file(...) + GZIP: ...}
REGISTRY_NAMESPACE = "meridian-registry"
GZIP = ".gz"  # a schema in the ConfigMap's binaryData is its file, gzip-compressed, under its file name + GZIP


def schema_file(group: str, version: str, kind: str) -> str:
    """The file in SCHEMAS_DIR with the CRD schema of one kind, e.g. ray.io_v1_RayJob.json."""
    return f"{group}_{version}_{kind}.json"


@dataclass(frozen=True)
class Thresholds:
    """What `preflight run` must measure on a machine, as numbers (the catalog's, less the tolerance)."""

    gpus: int  # GPUs each node must show
    min_tflops: float  # dense bf16 matmul per GPU
    min_busbw_one_node_gbps: float  # all-reduce bus bandwidth inside a node (NVLink)
    min_busbw_many_nodes_gbps: float  # and across nodes (the GPU NICs)
    rdma: bool  # whether the RDMA NICs are checked

    def args(self, nodes: int) -> tuple[str, ...]:
        """`preflight run` flags for a job on `nodes` such machines."""
        if not self.gpus:
            return ("--no-rdma",)
        busbw = self.min_busbw_one_node_gbps if nodes == 1 else self.min_busbw_many_nodes_gbps
        args = (f"--expect-gpus={self.gpus}", f"--min-tflops={self.min_tflops:g}", f"--min-busbw-gbps={busbw:g}")
        return args if self.rdma else (*args, "--no-rdma")


@dataclass(frozen=True)
class Machine:
    name: str
    gpus: int
    gpu_type: str  # GKE's accelerator label value; empty for a CPU machine
    gpu_model: str  # what people call it: H200
    vcpus: int
    memory_gb: int
    rdma_nics: int
    peak_bf16_tflops: float  # dense bf16 per GPU, the vendor's figure: what MFU is measured against
    preflight: Thresholds


@dataclass(frozen=True)
class Pool:
    """A GPU pool (`nodes` fixed), or a CPU pool (`nodes` its autoscaling maximum, `zone` empty: regional)."""

    name: str  # also the GKE node pool name (label cloud.google.com/gke-nodepool)
    zone: str
    team: str | None  # the team it is dedicated to; None: shared
    flex_start: bool
    nodes: int
    machine: Machine

    @property
    def gpus(self) -> int:
        return self.nodes * self.machine.gpus


@dataclass(frozen=True)
class Region:
    name: str
    cluster: str
    checkpoint_bucket: str
    pools: tuple[Pool, ...]
    cpu_pools: tuple[Pool, ...]  # Ray heads and CPU-only pods land here, never on GPU nodes
    # The cluster's pod range (CIDR), from fleet's address plan: a run across regions lets exactly
    # these reach its Lighthouse. Empty in a registry written before it existed.
    pod_range: str = ""


@dataclass(frozen=True)
class Team:
    name: str
    priority: str  # the default for the team's jobs
    ceiling: str  # the highest priority its jobs may ask for (the cluster's admission policy refuses more)
    quota: dict[str, int]  # region -> nominal GPUs: what its ClusterQueue holds there (fleet's quota plan)
    pool_quota: dict[str, dict[str, int]]  # region -> GPU pool -> nominal GPUs, whole nodes; sums to `quota`


@dataclass(frozen=True)
class Dataset:
    name: str  # the bucket name
    location: str  # GCS location: a region or a multi-region (US, EU)


@dataclass(frozen=True)
class Registry:
    project: str
    trainer_image: str
    image_registry: str  # the only registry Binary Authorization admits researchers' images from
    priorities: dict[str, int]  # name -> value (a higher value preempts a lower)
    regions: tuple[Region, ...]
    teams: tuple[Team, ...]
    datasets: tuple[Dataset, ...]

    def context(self, region: Region) -> str:
        """kubectl context name, as `gcloud container clusters get-credentials` writes it."""
        return f"gke_{self.project}_{region.name}_{region.cluster}"

    def credentials_command(self, region: Region) -> str:
        """What writes that context: GKE's DNS-based endpoint (no authorized-networks list to be on)."""
        return (
            f"gcloud container clusters get-credentials {region.cluster} --region {region.name} "
            f"--project {self.project} --dns-endpoint"
        )


def dumps(registry: Registry) -> str:
    return codec.dumps(registry, SCHEMA)


def loads(text: str, where: str) -> Registry:
    """The registry in `text`; contract.problem.Invalid (one line) when it is not one this version reads."""
    return codec.loads(Registry, text, SCHEMA, where)
