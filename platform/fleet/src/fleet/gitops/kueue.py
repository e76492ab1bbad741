"""Kueue configuration for one cluster: topology, flavors, queues, priorities.

Every team gets a ClusterQueue in one cohort, so quota a team leaves idle can
be borrowed by others and reclaimed when its owner needs it. A team's nominal
GPUs in the region are split over the pools it may use: its dedicated pools
first, then the shared pools in proportion to their size, in whole nodes.

Each CPU pool (Ray heads, CPU-only jobs) is a flavor of its own, with no GPU
toleration and no GPU quota. Its vCPUs and memory are split over the teams in
proportion to their GPU quota in the region, so a team's gangs can always
reclaim the CPU their heads need; idle CPU quota is borrowed like GPU quota.

Borrowing is bounded explicitly: in each flavor and resource a team may borrow
at most what the other teams hold nominally there (`borrowingLimit`). The
cohort has no quota of its own, so that is exactly the most Kueue could lend
anyway; written out, nominal + borrowingLimit summed over a team's flavors is
the most Kueue can ever admit for the team in the region, and the team
namespace's ResourceQuota (fleet.gitops.teams) is set to exactly that.
"""

from __future__ import annotations

from typing import Any

from fleet import names
from fleet.capacity import cpu_pool_capacity, pool_capacity
from fleet.gitops.objects import Obj, dump, obj
from fleet.model import CapacityMode, CpuPool, Fleet, GpuPool, Region, Team

API = "kueue.x-k8s.io/v1beta2"  # what Kueue 0.19 stores; v1alpha1 Topology is gone
TOPOLOGY = "gke-default"
TOPOLOGY_LEVELS = names.TOPOLOGY_LEVELS
COHORT = "meridian"
PROVISIONING_CHECK = "dws-prov"
PROVISIONING_CONFIG = "dws-config"
GPU = names.GPU_RESOURCE
GPU_TOLERATION = {"key": names.GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
QUEUED_TOLERATION = names.QUEUED_TOLERATION


# All-or-nothing start for gangs (Kueue "Setup All-or-nothing with ready Pods",
# https://kueue.sigs.k8s.io/docs/tasks/manage/setup_wait_for_pods_ready/; fields of
# config.kueue.x-k8s.io/v1beta2 WaitForPodsReady in Kueue v0.19.2). v1beta2 has no `enable`:
# the block's presence turns it on, and the manager decodes strictly, so an unknown key stops it.
WAIT_FOR_PODS_READY: dict[str, Any] = {
    # Nodes exist before admission (reservations; flex-start waits for its ProvisioningRequest) and the
    # trainer image is pre-pulled: 20 minutes covers pulls and preflight; past it the gang gives its nodes back.
    "timeout": "20m",
    # A running job that lost a pod: longer than Warden's node replacement, so a torchft job rides it out
    # on its remaining replica groups; a job left short for an hour gives its nodes back.
    "recoveryTimeout": "60m",
    "blockAdmission": False,  # sequential admission would serialize the fleet; TAS already places gangs whole
    "requeuingStrategy": {
        "timestamp": "Eviction",  # an evicted gang queues behind the others instead of retaking the front
        "backoffBaseSeconds": 60,
        "backoffMaxSeconds": 1800,
        # 60 s doubling to 30 min between tries: about 6 hours of tries, then the Workload is deactivated.
        "backoffLimitCount": 10,
    },
}


def manager_config() -> dict[str, Any]:
    """Kueue's manager Configuration: the chart's default (charts/kueue/values.yaml at v0.19.2) plus
    waitForPodsReady and the management of jobs without a queue name in team namespaces.

    The chart takes the whole file as one string (managerConfig.controllerManagerConfigYaml), so the
    defaults are repeated here; anything left out would fall back to Kueue's own defaults, not the chart's.
    """
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {
            "groupKindConcurrency": {
                "Job.batch": 5,
                "Pod": 5,
                "Workload.kueue.x-k8s.io": 10,
                "LocalQueue.kueue.x-k8s.io": 5,
                "ClusterQueue.kueue.x-k8s.io": 5,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            }
        },
        "clientConnection": {"qps": 300, "burst": 500},
        # Every job, pod and Ray object in a team namespace goes through Kueue: one without a queue-name
        # label is suspended (gated) instead of running beside the quotas. Only team namespaces: Warden, the
        # NCCL installer and Kueue itself run outside Kueue. (config.kueue.x-k8s.io/v1beta2 Configuration,
        # https://kueue.sigs.k8s.io/docs/reference/kueue-config.v1beta2/)
        "manageJobsWithoutQueueName": True,
        "managedJobsNamespaceSelector": {"matchExpressions": [{"key": names.TEAM_LABEL, "operator": "Exists"}]},
        "waitForPodsReady": WAIT_FOR_PODS_READY,
        "integrations": {
            "frameworks": [
                "batch/job",
                "kubeflow.org/mpijob",
                "ray.io/rayjob",
                "ray.io/rayservice",
                "ray.io/raycluster",
                "jobset.x-k8s.io/jobset",
                "workload.codeflare.dev/appwrapper",
                "trainer.kubeflow.org/trainjob",
                "pod",
                "deployment",
                "statefulset",
                "leaderworkerset.x-k8s.io/leaderworkerset",
            ]
        },
    }


def chart_values() -> dict[str, Any]:
    """Values for the Kueue Helm chart in the `kueue` Argo CD application."""
    config = dump([manager_config()]).split("\n", 1)[1]  # embedded: without the generated-by header
    return {"managerConfig": {"controllerManagerConfigYaml": config}}


def team_pools(region: Region, team: Team) -> list[GpuPool]:
    """Pools the team may use: shared ones and its own."""
    return [p for p in region.gpu_pools if p.team in (None, team.name)]


def split_quota(region: Region, team: Team) -> dict[str, int]:
    """Nominal GPUs per pool for the team, adding up to its quota in the region."""
    pools = team_pools(region, team)
    left = team.quota.get(region.name, 0)
    quota = {p.name: 0 for p in pools}
    for pool in pools:
        if pool.team == team.name:
            quota[pool.name] = min(left, pool_capacity(pool).gpus)
            left -= quota[pool.name]
    shared = [p for p in pools if p.team is None]
    total = sum(pool_capacity(p).gpus for p in shared)
    if left and total:
        budget = left
        for pool in shared:
            per_node = pool.machine.gpus
            quota[pool.name] = budget * pool_capacity(pool).gpus // total // per_node * per_node
            left -= quota[pool.name]
        for pool in sorted(shared, key=lambda p: -pool_capacity(p).gpus):  # rounding remainder to the largest pools
            extra = min(left, pool_capacity(pool).gpus - quota[pool.name])
            quota[pool.name] += extra
            left -= extra
    return quota


def apportion(total: int, weights: list[int]) -> list[int]:
    """`total` in whole units over `weights`, adding up exactly (largest remainder; ties to the first).

    No weight at all splits evenly.
    """
    if not weights:
        return []
    if not any(weights):
        weights = [1] * len(weights)
    whole = sum(weights)
    shares = [total * w // whole for w in weights]
    by_remainder = sorted(range(len(weights)), key=lambda i: (-(total * weights[i] % whole), i))
    for i in by_remainder[: total - sum(shares)]:
        shares[i] += 1
    return shares


def split_cpu(fleet: Fleet, region: Region, pool: CpuPool) -> dict[str, tuple[int, int]]:
    """Team -> (vCPUs, memory GB) of a CPU pool's capacity, in proportion to the teams' GPU quota here."""
    capacity = cpu_pool_capacity(pool)
    weights = [t.quota.get(region.name, 0) for t in fleet.teams]
    vcpus = apportion(capacity.vcpus, weights)
    memory = apportion(capacity.memory_gb, weights)
    return {t.name: (vcpus[i], memory[i]) for i, t in enumerate(fleet.teams)}


def _cpu_flavor(pool: CpuPool) -> Obj:
    # No GPU toleration: only pods without GPUs belong here, and Kueue adds a flavor's tolerations to pods.
    return obj(API, "ResourceFlavor", pool.name, spec={"nodeLabels": {"cloud.google.com/gke-nodepool": pool.name}})


def _flavor(pool: GpuPool) -> Obj:
    tolerations = [GPU_TOLERATION]
    if pool.capacity.mode is CapacityMode.FLEX_START:
        tolerations.append(QUEUED_TOLERATION)
    return obj(
        API,
        "ResourceFlavor",
        pool.name,
        spec={
            "nodeLabels": {"cloud.google.com/gke-nodepool": pool.name},
            "tolerations": tolerations,
            "topologyName": TOPOLOGY,
        },
    )


Quota = dict[str, int]  # resource -> amount (memory in GiB)


def _gpu_flavor_quota(pool: GpuPool, gpus: int) -> Quota:
    """GPU quota, and the CPU and memory that come with that many GPUs of the machine."""
    machine = pool.machine
    return {GPU: gpus, "cpu": gpus * machine.vcpus // machine.gpus, "memory": gpus * machine.memory_gb // machine.gpus}


def nominal_quotas(fleet: Fleet, region: Region, team: Team) -> dict[str, Quota]:
    """flavor -> nominal quota of the team's ClusterQueue, CPU flavors first (see _cluster_queue)."""
    flavors: dict[str, Quota] = {}
    for cpu_pool in region.cpu_pools:
        vcpus, memory_gb = split_cpu(fleet, region, cpu_pool)[team.name]
        flavors[cpu_pool.name] = {GPU: 0, "cpu": vcpus, "memory": memory_gb}
    quota = split_quota(region, team)
    for pool in team_pools(region, team):
        flavors[pool.name] = _gpu_flavor_quota(pool, quota[pool.name])
    return flavors


def borrowing_limits(fleet: Fleet, region: Region, team: Team) -> dict[str, Quota]:
    """flavor -> the most the team may borrow: what the other teams hold nominally in that flavor."""
    own = nominal_quotas(fleet, region, team)
    limits = {flavor: dict.fromkeys(quota, 0) for flavor, quota in own.items()}
    for other in fleet.teams:
        if other.name == team.name:
            continue
        for flavor, quota in nominal_quotas(fleet, region, other).items():
            for resource, amount in quota.items():
                if flavor in limits:
                    limits[flavor][resource] += amount
    return limits


def admissible(fleet: Fleet, region: Region, team: Team) -> Quota:
    """The most Kueue can admit for the team in the region: nominal + borrowingLimit over every flavor."""
    total = {GPU: 0, "cpu": 0, "memory": 0}
    nominal, borrowing = nominal_quotas(fleet, region, team), borrowing_limits(fleet, region, team)
    for flavor, quota in nominal.items():
        for resource, amount in quota.items():
            total[resource] += amount + borrowing[flavor][resource]
    return total


def _quantity(resource: str, amount: int) -> int | str:
    return f"{amount}Gi" if resource == "memory" else amount


def _cluster_queue(fleet: Fleet, region: Region, team: Team) -> Obj:
    pools = team_pools(region, team)
    nominal, borrowing = nominal_quotas(fleet, region, team), borrowing_limits(fleet, region, team)
    # A resource may sit in one resource group only, so the CPU flavors join the GPU flavors' group, with
    # no GPU quota: a GPU pod never fits them. They come first, so a CPU pod that names no pool gets the
    # CPU pool rather than an H200 flavor; pods that select their pool (gkr's) match only its flavor.
    flavors = [
        {
            "name": flavor,
            "resources": [
                {
                    "name": resource,
                    "nominalQuota": _quantity(resource, amount),
                    "borrowingLimit": _quantity(resource, borrowing[flavor][resource]),
                }
                for resource, amount in quota.items()
            ],
        }
        for flavor, quota in nominal.items()
    ]
    spec: Obj = {
        "cohortName": COHORT,
        # Only the team's own namespace may point a LocalQueue at this queue.
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": names.team_namespace(team.name)}},
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [{"coveredResources": [GPU, "cpu", "memory"], "flavors": flavors}],
        "preemption": {
            "reclaimWithinCohort": "Any",
            "borrowWithinCohort": {"policy": "LowerPriority"},
            "withinClusterQueue": "LowerPriority",
        },
    }
    flex = [p.name for p in pools if p.capacity.mode is CapacityMode.FLEX_START]
    if flex:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": PROVISIONING_CHECK, "onFlavors": flex}]}
    return obj(API, "ClusterQueue", team.name, labels={names.TEAM_LABEL: team.name}, spec=spec)


def kueue_objects(fleet: Fleet, region: Region) -> list[Obj]:
    objects = [
        obj(API, "Topology", TOPOLOGY, spec={"levels": [{"nodeLabel": label} for label in TOPOLOGY_LEVELS]}),
        obj(API, "Cohort", COHORT, spec={}),
        *(_cpu_flavor(p) for p in region.cpu_pools),
        *(_flavor(p) for p in region.gpu_pools),
    ]
    if any(p.capacity.mode is CapacityMode.FLEX_START for p in region.gpu_pools):
        objects += [
            obj(
                API,
                "ProvisioningRequestConfig",
                PROVISIONING_CONFIG,
                spec={"provisioningClassName": "queued-provisioning.gke.io", "managedResources": [GPU]},
            ),
            obj(
                API,
                "AdmissionCheck",
                PROVISIONING_CHECK,
                spec={
                    "controllerName": "kueue.x-k8s.io/provisioning-request",
                    "parameters": {
                        "apiGroup": "kueue.x-k8s.io",
                        "kind": "ProvisioningRequestConfig",
                        "name": PROVISIONING_CONFIG,
                    },
                },
            ),
        ]
    objects += [
        obj(API, "WorkloadPriorityClass", p.name, value=p.value, description=f"Meridian priority {p.name}")
        for p in fleet.priorities
    ]
    for team in fleet.teams:
        objects.append(_cluster_queue(fleet, region, team))
        objects.append(
            obj(
                API,
                "LocalQueue",
                names.local_queue(team.name),
                names.team_namespace(team.name),
                spec={"clusterQueue": team.name},
            )
        )
    return objects
