"""What gkr needs to know about the fleet, as plain data, cached per fleet.yaml.

Validating fleet.yaml takes the full pydantic model (a tenth of a second and
more to import and build). gkr does it once per version of the file and keeps
the result in $XDG_CACHE_HOME/gkr/registry-<sha256>.json: later calls read
plain JSON. A change to fleet.yaml (or to this format) makes a new entry.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

FORMAT = "gkr.registry/v4"  # v2: CPU pools, image registry, dataset buckets; v3: priority values, team ceilings;
# v4: team quotas from fleet's quota plan


@dataclass(frozen=True)
class Machine:
    name: str
    gpus: int
    gpu_type: str
    gpu_model: str
    vcpus: int
    memory_gb: int
    rdma_nics: int
    preflight_one_node: tuple[str, ...]  # preflight flags for a job on one node
    preflight_many_nodes: tuple[str, ...]  # and across nodes


@dataclass(frozen=True)
class Pool:
    """A GPU pool (`nodes` fixed), or a CPU pool (`nodes` its autoscaling maximum, `zone` empty: regional)."""

    name: str  # also the GKE node pool name (label cloud.google.com/gke-nodepool)
    zone: str
    team: str | None
    flex_start: bool
    nodes: int
    machine: Machine


@dataclass(frozen=True)
class Region:
    name: str
    cluster: str
    checkpoint_bucket: str
    pools: tuple[Pool, ...]
    cpu_pools: tuple[Pool, ...]  # Ray heads and CPU-only pods land here, never on GPU nodes


@dataclass(frozen=True)
class Team:
    name: str
    priority: str  # the default for the team's jobs
    ceiling: str  # the highest priority its jobs may ask for (the cluster's admission policy refuses more)
    quota: dict[str, int]  # region -> usable nominal GPUs, from fleet's quota plan: what its ClusterQueue holds


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


def from_fleet(loaded: Any) -> Registry:
    """From fleet.load's LoadedFleet: the spec, and its quota plan for the teams' quotas."""
    from fleet.catalog import thresholds

    def preflight_args(m: Any, nodes: int) -> tuple[str, ...]:
        return thresholds(m).args(nodes)

    from fleet.model import CapacityMode

    def machine(m: Any) -> Machine:
        return Machine(
            m.name,
            m.gpus,
            m.gpu_type or "",
            m.gpu_model,
            m.vcpus,
            m.memory_gb,
            m.rdma_nics,
            tuple(preflight_args(m, 1)),
            tuple(preflight_args(m, 2)),
        )

    fleet, quotas = loaded.fleet, loaded.quotas

    regions = tuple(
        Region(
            r.name,
            fleet.cluster_name(r),
            fleet.buckets.checkpoint_bucket(r.name),
            tuple(
                Pool(p.name, p.zone, p.team, p.capacity.mode is CapacityMode.FLEX_START, p.nodes, machine(p.machine))
                for p in r.gpu_pools
            ),
            tuple(Pool(p.name, "", None, False, p.max_nodes, machine(p.machine)) for p in r.cpu_pools),
        )
        for r in fleet.regions
    )
    teams = tuple(
        Team(t.name, t.priority, t.ceiling, {r.name: quotas.team(r.name, t.name).gpus for r in fleet.regions})
        for t in fleet.teams
    )
    return Registry(
        fleet.project.id,
        fleet.versions.trainer_image,
        fleet.registry.url(fleet.project.id),
        {p.name: p.value for p in fleet.priorities},
        regions,
        teams,
        tuple(Dataset(d.name, d.location) for d in fleet.buckets.datasets),
    )


def to_json(registry: Registry) -> str:
    return json.dumps({"format": FORMAT, **asdict(registry)}, sort_keys=True)


def from_json(text: str) -> Registry:
    data = json.loads(text)
    if data.pop("format", None) != FORMAT:
        raise ValueError("not a registry of this format")
    regions = tuple(
        Region(
            r["name"],
            r["cluster"],
            r["checkpoint_bucket"],
            _pools(r["pools"]),
            _pools(r["cpu_pools"]),
        )
        for r in data["regions"]
    )
    teams = tuple(Team(**t) for t in data["teams"])
    return Registry(
        data["project"],
        data["trainer_image"],
        data["image_registry"],
        {str(k): int(v) for k, v in data["priorities"].items()},
        regions,
        teams,
        tuple(Dataset(**d) for d in data["datasets"]),
    )


def _pools(data: list[dict[str, Any]]) -> tuple[Pool, ...]:
    return tuple(Pool(**{**p, "machine": _machine(p["machine"])}) for p in data)


def _machine(data: dict[str, Any]) -> Machine:
    return Machine(
        **{
            **data,
            "preflight_one_node": tuple(data["preflight_one_node"]),
            "preflight_many_nodes": tuple(data["preflight_many_nodes"]),
        }
    )


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gkr"


def load(fleet_path: Path) -> Registry:
    """The registry for this fleet.yaml; raises contract.problem.Invalid when the spec is invalid."""
    text = fleet_path.read_bytes()
    key = hashlib.sha256(FORMAT.encode() + b"\0" + text).hexdigest()[:24]
    cached = cache_dir() / f"registry-{key}.json"
    try:
        return from_json(cached.read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    from fleet.load import load_text  # the slow path: the full model, once per version of the file

    registry = from_fleet(load_text(text.decode("utf-8"), str(fleet_path)))
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(f".{os.getpid()}.part")
        partial.write_text(to_json(registry), encoding="utf-8")
        partial.replace(cached)
    except OSError:
        pass  # a read-only home still works, only slower
    return registry
