"""Kueue configuration for one cluster: topology, flavors, queues, priorities.

Every team gets a ClusterQueue in one cohort, so quota a team leaves idle can
be borrowed by others and reclaimed when its owner needs it. What each queue
holds, per flavor (nominal quota and borrowing limit), is read from the quota
plan (fleet.quotaplan), which also sets the team namespaces' ResourceQuotas
(fleet.gitops.teams) and gkr's quota check: nothing here recomputes it.

GPUs no team's nominal quota covers (a grown pool, a region without quota) are
the Cohort's own quota (fleet.quotaplan, `RegionQuotas.cohort`), lent to every
queue in it; each queue's borrowing limit reaches it.

Each CPU pool (Ray heads, CPU-only jobs) is a flavor of its own, with no GPU
toleration and no GPU quota; idle CPU quota is borrowed like GPU quota.

Warden's idle-node sweeps (issue 21) queue in a ClusterQueue of their own in
the same cohort, with no quota of their own: every sweep borrows quota teams
leave idle, so the teams' queues reclaim it (`reclaimWithinCohort: Any`) and,
when they borrow themselves, preempt it as the lowest priority
(`borrowWithinCohort: LowerPriority`); the sweep queue itself never preempts
anything (every policy `Never`). Kueue "Preemption"
(https://kueue.sigs.k8s.io/docs/concepts/preemption/) and "Cluster Queue",
section Preemption (https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/#preemption).

Which namespaces Kueue manages: a Job, queue name or not, is Kueue's only in a namespace
`managedJobsNamespaceSelector` selects (v0.19.2 `pkg/controller/jobframework/reconciler.go`
`ReconcileGenericJob`, "Namespace not opted in"; upstream e2e test/e2e/sequential/baseline/reconcile_test.go
"should not reconcile a job in the default (unmanaged) namespace"): one created suspended elsewhere stays
suspended. So the sweeps run in a namespace of their own, names.SWEEP_NAMESPACE, not in Warden's: with
`manageJobsWithoutQueueName` Kueue would gate Warden's own Deployment and DaemonSet pods there. A label
selector cannot OR, so the selector matches names.KUEUE_MANAGED_LABEL, which the team namespaces
(fleet.gitops.admission `team_namespace_labels`) and the sweep namespace (fleet.gitops.warden) carry; the
team label alone still decides where the tenancy policies bind, and the sweep namespace has none.

Topology-aware everywhere (Kueue v0.19.2; the rules are checked in fleet.controllers.kueue). A PodSet that
asks for no topology gets a topology-aware flavor only in a queue whose every flavor is topology-aware
(`pkg/scheduler/flavorassigner/tas_flavorassigner.go` `checkPodSetAndFlavorMatchForTAS`, `isTASImplied`;
`pkg/cache/scheduler/clusterqueue.go` `isTASOnly`; upstream test pkg/scheduler/scheduler_tas_test.go
"workload which does not need TAS skips the TAS flavor"). So every flavor names a Topology: the GPU flavors
`gke-default` (GKE's block, sub-block and host labels, then `kubernetes.io/hostname`), the CPU flavors
`hostname` (that label alone: CPU nodes carry no gce-topology labels, and a topology-aware flavor counts only
nodes with every level's label, `pkg/util/tas/node.go` `NodeMatchesFlavor`). Flavors of one queue may name
different Topologies: the cache keeps one per flavor (`clusterQueue.updateFlavorMetadata`), no webhook or CRD
rule compares them, and the upstream test "workload requests topology level which is only present in second
flavor" admits onto the second of two such flavors. Both Topologies end in `kubernetes.io/hostname`: Kueue
replaces a failed node only in assignments whose lowest level is the hostname (`pkg/util/tas/tas.go`
`IsLowestLevelHostname`, used by `pkg/workload/workload.go` `PodSetsOnNode` and the TAS cache).

Node hot swap: the feature gates are set in the manager Configuration (fleet.controllers.gates: where Kueue
reads them, and why each). When a node of an admitted topology-aware workload fails (deleted, or NotReady
with its pods terminated; NotReady for `NodeFailureDelay` 30 s alone only under
TASReplaceNodeDueToNotReadyOverFixedTime, which is off: `pkg/controller/tas/node_controller.go`), Kueue
records it in the Workload's `status.unhealthyNodes` and its scheduler's second pass looks for a replacement
node (for a sliced PodSet, inside the slice's domain: `pkg/cache/scheduler/tas_flavor_snapshot.go`
`requiredReplacementDomain`). With TASFailedNodeReplacementFailFast on (0.19's default), the first pass that
finds none evicts the whole workload (`pkg/scheduler/scheduler.go` `processEntry` -> `handleFailedTASReplacement`
-> `evictWorkloadAfterFailedTASReplacement`; test "workload with unhealthyNode annotation; second pass;
preferred; no fit; FailFast"). Off, as here, the workload keeps its admission and topology assignment, a
SecondPassFailed event is recorded, and the second pass is retried with exponential backoff
(`scheduler.go` `requeueAndUpdate` -> `pkg/cache/queue/manager.go` `QueueSecondPassIfNeeded`; test "workload
with unhealthyNode annotation; second pass; preferred; no fit" keeps the old assignment): the trainer rides
out the lost node on its other replica groups until a node frees up or is repaired. A second node failing
while one awaits replacement still evicts the workload (`node_controller.go` `evictWorkloadIfNeeded`,
"multiple node failures").
"""

from __future__ import annotations

from typing import Any

from contract.registry import team_pools
from fleet import names
from fleet.controllers import gates
from fleet.gitops.objects import Obj, dump, obj
from fleet.model import CapacityMode, CpuPool, Fleet, GpuPool, Region, Team
from fleet.quotaplan import QuotaPlan, TeamQuota

API = "kueue.x-k8s.io/v1beta2"  # what Kueue 0.19 stores; v1alpha1 Topology is gone
TOPOLOGY = "gke-default"
TOPOLOGY_LEVELS = names.TOPOLOGY_LEVELS
HOST_TOPOLOGY = "hostname"  # the CPU flavors': one level, the node (module docstring)
COHORT = "meridian"
PROVISIONING_CHECK = "dws-prov"
PROVISIONING_CONFIG = "dws-config"
GPU = names.GPU_RESOURCE
GPU_TOLERATION = {"key": names.GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
KUEUE_MANAGED = {names.KUEUE_MANAGED_LABEL: "true"}  # the namespaces Kueue manages (module docstring)
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
        # enableClusterQueueResources: the per-queue usage and quota gauges the dashboards and alerts read
        # (config.kueue.x-k8s.io/v1beta2 ControllerMetrics; off by default, commented out in the chart's values).
        "metrics": {"bindAddress": ":8443", "enableClusterQueueResources": True},
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
        # label is suspended (gated) instead of running beside the quotas. Only the team namespaces and
        # Warden's sweeps' (module docstring): Warden, the NCCL installer and Kueue itself run outside Kueue.
        # (config.kueue.x-k8s.io/v1beta2 Configuration, https://kueue.sigs.k8s.io/docs/reference/kueue-config.v1beta2/)
        "manageJobsWithoutQueueName": True,
        "managedJobsNamespaceSelector": {"matchLabels": dict(KUEUE_MANAGED)},
        "waitForPodsReady": WAIT_FOR_PODS_READY,
        # Here and not in the chart's controllerManager.featureGates: Kueue refuses both at once
        # (fleet.controllers.gates); every gate Meridian relies on is written, defaults included.
        "featureGates": {gate: wanted for gate, (wanted, _) in gates.RELIED_ON.items()},
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


def chart_values(image: str) -> dict[str, Any]:
    """Values for the Kueue Helm chart in the `kueue` Argo CD application, rendered from charts/kueue at the
    release's commit (fleet.upstream): `image` is the release's controller image (fleet.images.UPSTREAM).

    In git the chart's values name the staging build (k8s-staging-images/kueue/kueue:release-0.19, pulled
    Always); kueue hack/helm-chart-package.sh (tag v0.19.2) sets the controller image's repository, tag and
    IfNotPresent when it packages the released chart, and so do these values. Its other image rewrites are for
    KueueViz, which stays off (`enableKueueViz: false`, the chart's default).
    """
    config = dump([manager_config()]).split("\n", 1)[1]  # embedded: without the generated-by header
    repository, tag = image.rsplit(":", 1)
    return {
        "controllerManager": {
            "manager": {"image": {"repository": repository, "tag": tag, "pullPolicy": "IfNotPresent"}}
        },
        "managerConfig": {"controllerManagerConfigYaml": config},
    }


def _cpu_flavor(pool: CpuPool) -> Obj:
    # No GPU toleration: only pods without GPUs belong here, and Kueue adds a flavor's tolerations to pods.
    # Topology-aware, so that every queue is (module docstring).
    return obj(
        API,
        "ResourceFlavor",
        pool.name,
        spec={"nodeLabels": {names.NODE_POOL_LABEL: pool.name}, "topologyName": HOST_TOPOLOGY},
    )


def _flavor(pool: GpuPool) -> Obj:
    tolerations = [GPU_TOLERATION]
    if pool.capacity.mode is CapacityMode.FLEX_START:
        tolerations.append(QUEUED_TOLERATION)
    return obj(
        API,
        "ResourceFlavor",
        pool.name,
        spec={
            "nodeLabels": {names.NODE_POOL_LABEL: pool.name},
            "tolerations": tolerations,
            "topologyName": TOPOLOGY,
        },
    )


# The order of a queue's flavors is the order Kueue tries them for a pod that selects no pool, and the first
# that fits wins (v1beta2 flavorFungibility.whenCanBorrow defaults to MayStopSearch; fleet.controllers.kueue).
# gkr's pods select their pool, so this order is for everything else (kubectl, other tools): capacity already
# paid for first (a reservation; then fixed on-demand nodes), then flex-start (nodes are made for the workload,
# minutes to hours later, and billed while it runs), spot last (Compute Engine takes it back at any time, and
# with it a gang). CPU flavors come before all of them (see _cluster_queue).
FLAVOR_ORDER = (CapacityMode.RESERVATION, CapacityMode.ON_DEMAND, CapacityMode.FLEX_START, CapacityMode.SPOT)


def _in_flavor_order(region: Region, flavors: list[str]) -> list[str]:
    """CPU pools first (in fleet.yaml's order), then GPU pools by FLAVOR_ORDER, fleet.yaml's order within a mode."""
    rank = {p.name: -1 for p in region.cpu_pools}
    rank.update({p.name: FLAVOR_ORDER.index(p.capacity.mode) for p in region.gpu_pools})
    return sorted(flavors, key=lambda name: rank[name])


def _quantity(resource: str, amount: int) -> int | str:
    return f"{amount}Gi" if resource == "memory" else amount


def _cluster_queue(region: Region, team: Team, quotas: TeamQuota) -> Obj:
    pools = team_pools(region.gpu_pools, team.name)
    nominal, borrowing = quotas.nominal, quotas.borrowing
    # A resource may sit in one resource group only, so the CPU flavors join the GPU flavors' group, with
    # no GPU quota: a GPU pod never fits them. They come first, so a CPU pod that names no pool gets the
    # CPU pool rather than an H200 flavor; pods that select their pool (gkr's) match only its flavor. The
    # GPU flavors follow in FLAVOR_ORDER.
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
        for flavor, quota in ((f, nominal[f]) for f in _in_flavor_order(region, list(nominal)))
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


SWEEP_PRIORITY_OFFSET = 100  # the sweeps' WorkloadPriorityClass sits this far below the fleet's lowest
SWEEP_POD_PRIORITY = -1000  # below team pods (no PriorityClass: 0), so the scheduler too preempts a sweep's pod


def _sweep_flavors(fleet: Fleet, region: Region, quotas: QuotaPlan) -> list[dict[str, Any]]:
    """The sweep queue's flavors: every GPU pool but flex-start ones, with nothing of its own and a borrowing
    limit of everything the teams and the cohort hold there (stated, as every queue's limit is)."""
    pools = _in_flavor_order(
        region, [p.name for p in region.gpu_pools if p.capacity.mode is not CapacityMode.FLEX_START]
    )
    cohort = quotas.regions[region.name].cohort
    held: dict[str, dict[str, int]] = {pool: dict(cohort.get(pool, {GPU: 0, "cpu": 0, "memory": 0})) for pool in pools}
    for team in fleet.teams:
        for flavor, quota in quotas.team(region.name, team.name).nominal.items():
            for resource, amount in quota.items():
                if flavor in held:
                    held[flavor][resource] += amount
    return [
        {
            "name": pool,
            "resources": [
                {"name": r, "nominalQuota": _quantity(r, 0), "borrowingLimit": _quantity(r, amount)}
                for r, amount in held[pool].items()
            ],
        }
        for pool in pools
    ]


def sweep_objects(fleet: Fleet, region: Region, quotas: QuotaPlan) -> list[Obj]:
    """The queue and priorities of Warden's sweeps (module docstring), on the region's GPU pools.

    Flex-start pools are left out: their nodes come for one workload and go with it, and are burned in
    when they join; a ProvisioningRequest for a check would make a node, not check one.
    """
    flavors = _sweep_flavors(fleet, region, quotas)
    never = "Never"
    queue = obj(
        API,
        "ClusterQueue",
        names.SWEEP_QUEUE,
        spec={
            "cohortName": COHORT,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": names.SWEEP_NAMESPACE}},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [{"coveredResources": [GPU, "cpu", "memory"], "flavors": flavors}],
            "preemption": {
                "reclaimWithinCohort": never,
                "borrowWithinCohort": {"policy": never},
                "withinClusterQueue": never,
            },
        },
    )
    lowest = min(p.value for p in fleet.priorities) - SWEEP_PRIORITY_OFFSET
    return [
        queue,
        obj(
            API,
            "WorkloadPriorityClass",
            names.SWEEP_PRIORITY,
            value=lowest,
            description="Warden's idle-node sweeps: below every job, so any job preempts them",
        ),
        obj(
            "scheduling.k8s.io/v1",
            "PriorityClass",
            names.SWEEP_PRIORITY,
            value=SWEEP_POD_PRIORITY,
            preemptionPolicy="Never",
            globalDefault=False,
            description="Warden's idle-node sweeps: never preempt, preempted by any pod",
        ),
    ]


def sweep_local_queue() -> Obj:
    """The sweeps' LocalQueue, in their namespace: shipped with Warden (its project may write there;
    the fleet-config project may not, as that namespace allows privileged pods), a wave after the queues."""
    return obj(API, "LocalQueue", names.SWEEP_QUEUE, names.SWEEP_NAMESPACE, spec={"clusterQueue": names.SWEEP_QUEUE})


def cohort(region: Region, quotas: QuotaPlan) -> Obj:
    """The cohort, holding as its own quota the GPUs no team's nominal quota covers (module docstring)."""
    lent = quotas.regions[region.name].cohort
    if not lent:
        return obj(API, "Cohort", COHORT, spec={})
    flavors = [
        {"name": flavor, "resources": [{"name": r, "nominalQuota": _quantity(r, n)} for r, n in quota.items()]}
        for flavor, quota in lent.items()
    ]
    return obj(
        API,
        "Cohort",
        COHORT,
        spec={"resourceGroups": [{"coveredResources": [GPU, "cpu", "memory"], "flavors": flavors}]},
    )


def kueue_objects(fleet: Fleet, region: Region, quotas: QuotaPlan) -> list[Obj]:
    objects = [
        obj(API, "Topology", TOPOLOGY, spec={"levels": [{"nodeLabel": label} for label in TOPOLOGY_LEVELS]}),
        *(
            [obj(API, "Topology", HOST_TOPOLOGY, spec={"levels": [{"nodeLabel": names.HOSTNAME_LABEL}]})]
            if region.cpu_pools
            else []
        ),
        cohort(region, quotas),
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
        objects.append(_cluster_queue(region, team, quotas.team(region.name, team.name)))
        objects.append(
            obj(
                API,
                "LocalQueue",
                names.local_queue(team.name),
                names.team_namespace(team.name),
                spec={"clusterQueue": team.name},
            )
        )
    return objects + sweep_objects(fleet, region, quotas)
