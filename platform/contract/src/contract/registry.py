"""What a job tool needs to know about the fleet: written by `make generate`, read by gkr.

fleet computes it once from fleet.yaml (its model, address and quota plans)
and writes `generated/registry.json`; the same document is published in each
cluster as the ConfigMap REGISTRY_CONFIGMAP, so a gkr installed outside the
repository can fetch it. Numbers only: nothing here is recomputed by a reader.

Its authenticity is who may write it (the repository's review, then Argo CD); what the decoder checks
is that no value is one that cannot be right (``problems``): gkr turns these values into mounts,
network rules, kubectl contexts and shell commands as they are.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from contract import codec, names
from contract.names import team_namespace
from contract.problem import Invalid

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


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
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


class _Owned(Protocol):
    @property
    def team(self) -> str | None: ...


OwnedT = TypeVar("OwnedT", bound=_Owned)


def team_pools(pools: Iterable[OwnedT], team: str) -> list[OwnedT]:
    """The pools a team may use: the shared ones and its own. The one rule fleet's quota plan and gkr apply."""
    return [p for p in pools if p.team in (None, team)]


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
class Region:
    name: str
    cluster: str
    checkpoint_bucket: str
    pools: tuple[Pool, ...]
    cpu_pools: tuple[Pool, ...]  # Ray heads and CPU-only pods land here, never on GPU nodes
    # The cluster's pod range (CIDR), from fleet's address plan: a run across regions lets exactly
    # these reach its Lighthouse. Empty in a registry written before it existed.
    pod_range: str = ""


@dataclass(frozen=True, kw_only=True)
class Team:
    name: str
    priority: str  # the default for the team's jobs
    ceiling: str  # the highest priority its jobs may ask for (the cluster's admission policy refuses more)
    quota: dict[str, int]  # region -> nominal GPUs: what its ClusterQueue holds there (fleet's quota plan)
    pool_quota: dict[str, dict[str, int]]  # region -> GPU pool -> nominal GPUs, whole nodes; sums to `quota`
    # region -> the team namespace's object counts there (ResourceQuota `hard` name -> count, fleet.objectquota);
    # empty in a registry written before them.
    objects: dict[str, dict[str, int]] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Dataset:
    name: str  # the bucket name
    location: str  # GCS location: a region or a multi-region (US, EU)


@dataclass(frozen=True, kw_only=True)
class Registry:
    project: str
    supernet: str  # the fleet's address block (fleet.yaml network.supernet): every pod range lies inside it
    checkpoint_prefix: str  # the fleet's checkpoint buckets are <checkpoint_prefix>-<region>, one per region
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


FIX = "regenerate it with `make generate`"  # the codec's own advice for a registry it cannot read


def loads(text: str, where: str) -> Registry:
    """The registry in `text`; contract.problem.Invalid (one line per problem) when it is not one this
    version reads, or holds a value that cannot be right."""
    registry = codec.loads(Registry, text, SCHEMA, where, FIX)
    found = problems(registry)
    if found:
        raise Invalid([f"{where}: {line}; {FIX}" for line in found])
    return registry


# --- What cannot be right -------------------------------------------------------------------------------
# Bucket, GKE cluster and node pool names, project IDs and team names follow contract.names' rules (issue 40:
# fleet's model had its own, and they differed). Datasets' buckets may be dotted: the fleet does not create them.
# GCP region and zone names: us-central1, northamerica-northeast2; a zone is its region plus -<letter>.
_REGION = re.compile(r"[a-z]{2,20}-[a-z]{2,20}[0-9]{1,2}")
_LOCATION = re.compile(r"[A-Za-z][A-Za-z0-9-]{1,39}")  # a GCS location: US, EU, NAM4, us-central1
PRIVATE = tuple(ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))  # RFC 1918


def is_cluster_name(name: str) -> bool:
    return names.is_dns1035_label(name, names.GKE_NAME_MAX)


def problems(registry: Registry) -> list[str]:
    """`path: what is wrong` for each value that cannot be right; empty when there is none. Pure."""
    found: list[str] = []

    def check(ok: bool, path: str, what: str) -> None:
        if not ok:
            found.append(f"{path}: {what}")

    check(names.is_project_id(registry.project), "project", f"{_show(registry.project)} is not a GCP project ID")
    supernet = _network(registry.supernet, "supernet", found)
    if supernet is not None:
        check(_private(supernet), "supernet", f"{supernet} is not a private range (RFC 1918)")
    prefix_ok = names.is_bucket_name(registry.checkpoint_prefix)
    check(prefix_ok, "checkpoint_prefix", f"{_show(registry.checkpoint_prefix)} is not a Cloud Storage bucket name")
    ranges: list[tuple[str, ipaddress.IPv4Network]] = []
    for i, region in enumerate(registry.regions):
        at = f"regions[{i}]"
        check(bool(_REGION.fullmatch(region.name)), f"{at}.name", f"{_show(region.name)} is not a GCP region name")
        check(is_cluster_name(region.cluster), f"{at}.cluster", f"{_show(region.cluster)} is not a GKE cluster name "
              "(a lowercase letter, then at most 39 lowercase letters, digits or '-', not ending with '-')")  # fmt: skip
        bucket = f"{registry.checkpoint_prefix}-{region.name}"
        if prefix_ok and region.checkpoint_bucket != bucket:
            found.append(
                f"{at}.checkpoint_bucket: {_show(region.checkpoint_bucket)} is not the fleet's bucket {bucket}"
            )
        if region.pod_range:  # empty: a registry from before pod ranges (gkr says so where it needs one)
            pods = _network(region.pod_range, f"{at}.pod_range", found)
            if pods is not None and supernet is not None and not pods.subnet_of(supernet):
                found.append(f"{at}.pod_range: {pods} is not inside the fleet's supernet {supernet}")
            elif pods is not None and not _private(pods):
                found.append(f"{at}.pod_range: {pods} is not a private range (RFC 1918)")
            elif pods is not None:
                clash = next((where for where, other in ranges if pods.overlaps(other)), None)
                check(clash is None, f"{at}.pod_range", f"{pods} overlaps {clash}'s")
                ranges.append((at, pods))
        for kind, pools in (("pools", region.pools), ("cpu_pools", region.cpu_pools)):
            for j, pool in enumerate(pools):
                where = f"{at}.{kind}[{j}]"
                check(is_cluster_name(pool.name), f"{where}.name", f"{_show(pool.name)} is not a GKE node pool name")
                zone_ok = pool.zone == "" if kind == "cpu_pools" else _in_region(pool.zone, region.name)
                check(zone_ok, f"{where}.zone", f"{_show(pool.zone)} is not a zone of {_show(region.name)}")
    for i, team in enumerate(registry.teams):
        # A DNS label inside its namespace's name (team-<team>) and a path segment of every bucket's team prefix.
        ok = names.is_dns1035_label(team.name) and names.is_dns1123_label(team_namespace(team.name))
        check(ok, f"teams[{i}].name", f"{_show(team.name)} is not a team name (a DNS label)")
    for i, dataset in enumerate(registry.datasets):
        check(
            names.is_bucket_name(dataset.name),
            f"datasets[{i}].name",
            f"{_show(dataset.name)} is not a Cloud Storage bucket name",
        )
        check(bool(_LOCATION.fullmatch(dataset.location)), f"datasets[{i}].location",
              f"{_show(dataset.location)} is not a Cloud Storage location")  # fmt: skip
    return found


def _network(text: str, path: str, found: list[str]) -> ipaddress.IPv4Network | None:
    try:
        net = ipaddress.IPv4Network(text)  # strict: host bits set is a typo or a forgery, not a range
    except ValueError:
        found.append(f"{path}: {_show(text)} is not a CIDR range (e.g. 10.0.0.0/13)")
        return None
    return net


def _private(net: ipaddress.IPv4Network) -> bool:
    return any(net.subnet_of(block) for block in PRIVATE)


def _in_region(zone: str, region: str) -> bool:
    return zone.startswith(f"{region}-") and len(zone) == len(region) + 2 and zone[-1].isascii() and zone[-1].islower()


def _show(value: str) -> str:
    """A value as it may be echoed on one line: quoted, escaped, cut short."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
