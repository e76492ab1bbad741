"""The registry a job tool reads (contract.registry), computed from a loaded fleet.

Everything here is read off the validated model and its plans (quotas from
the quota plan, thresholds from the catalog); `make generate` writes it to
generated/registry.json and into each cluster's registry ConfigMap.
"""

from __future__ import annotations

from contract import registry as r
from fleet.catalog import MachineType, thresholds
from fleet.load import LoadedFleet
from fleet.model import CapacityMode, CpuPool, GpuPool
from fleet.objectquota import object_quota


def machine(m: MachineType) -> r.Machine:
    return r.Machine(
        name=m.name,
        gpus=m.gpus,
        gpu_type=m.gpu_type or "",
        gpu_model=m.gpu_model,
        vcpus=m.vcpus,
        memory_gb=m.memory_gb,
        rdma_nics=m.rdma_nics,
        peak_bf16_tflops=float(m.peak_bf16_tflops),
        preflight=thresholds(m),
    )


def gpu_pool(pool: GpuPool) -> r.Pool:
    return r.Pool(
        name=pool.name,
        zone=pool.zone,
        team=pool.team,
        flex_start=pool.capacity.mode is CapacityMode.FLEX_START,
        nodes=pool.nodes,
        machine=machine(pool.machine),
    )


def cpu_pool(pool: CpuPool) -> r.Pool:
    return r.Pool(
        name=pool.name, zone="", team=None, flex_start=False, nodes=pool.max_nodes, machine=machine(pool.machine)
    )


def registry_of(loaded: LoadedFleet) -> r.Registry:
    """The registry of a loaded fleet, from the address and quota plans load() made for it."""
    fleet, quotas = loaded.fleet, loaded.quotas
    pod_ranges = {ranges.region: str(ranges.pods.cidr) for ranges in loaded.addresses.regions}
    services = {ranges.region: ranges.services.cidr for ranges in loaded.addresses.regions}
    regions = tuple(
        r.Region(
            name=region.name,
            cluster=fleet.cluster_name(region),
            checkpoint_bucket=fleet.buckets.checkpoint_bucket(region.name),
            pools=tuple(gpu_pool(p) for p in region.gpu_pools),
            cpu_pools=tuple(cpu_pool(p) for p in region.cpu_pools),
            pod_range=pod_ranges[region.name],
        )
        for region in fleet.regions
    )
    teams = tuple(
        r.Team(
            name=t.name,
            priority=t.priority,
            ceiling=t.ceiling,
            quota={region.name: quotas.team(region.name, t.name).gpus for region in fleet.regions},
            pool_quota={region.name: dict(quotas.team(region.name, t.name).pools) for region in fleet.regions},
            # The counts the team namespace's ResourceQuota holds (fleet.gitops.teams): gkr's summary checks a job's.
            objects={
                region.name: object_quota(fleet, region, services[region.name], quotas.team(region.name, t.name))
                for region in fleet.regions
            },
        )
        for t in fleet.teams
    )
    return r.Registry(
        project=fleet.project.id,
        supernet=str(fleet.network.supernet),
        checkpoint_prefix=fleet.buckets.checkpoint_prefix,
        trainer_image=fleet.versions.trainer_image,
        image_registry=fleet.registry.url(fleet.project.id),
        priorities={p.name: p.value for p in fleet.priorities},
        regions=regions,
        teams=teams,
        datasets=tuple(r.Dataset(name=d.name, location=d.location) for d in fleet.buckets.datasets),
    )
