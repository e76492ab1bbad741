"""Object-count quotas of a team's namespace in a region: how many pods, Services, Secrets, ConfigMaps,
PVCs and Events it may hold, each sized from the fleet (issue 39, item 4).

`object_quota` is the one function that computes them: the team namespace's ResourceQuota
(fleet.gitops.teams) and gkr's registry (fleet.registry, read by gkr's summary) both take its numbers.
A team's `objects` in fleet.yaml (model.ObjectCounts) overrides a derived number; `problems` refuses
Service counts the cluster's Service range cannot hand out.

The names are the ResourceQuota's own (Kubernetes docs, "Resource Quotas", "Object count quota",
https://kubernetes.io/docs/concepts/policy/resource-quotas/#object-count-quota): `pods` (pods in a
non-terminal state), `services`, `services.loadbalancers`, `services.nodeports`, `secrets`, `configmaps`,
`persistentvolumeclaims`; any other kind as `count/<resource>` for the core group and
`count/<resource>.<group>` otherwise. The quota admission plugin charges a create to the name of the
request's own group (k8s.io/apiserver `pkg/admission/plugin/resourcequota/controller.go`,
`quotaEvaluator.Evaluate`, which makes a `generic.NewObjectCountEvaluator` for the request's
GroupResource): a core Event written through /api/v1 is `count/events`, the same Event written through
events.k8s.io/v1 is `count/events.events.k8s.io`. Both are set, to the same number, so neither API is a
way around the other (the quota controller recounts each from the one Event store).
"""

from __future__ import annotations

from ipaddress import IPv4Network

from contract.problem import Problem
from fleet import names
from fleet.model import Fleet, Region
from fleet.quotaplan import TeamQuota

EVENTS = ("count/events", "count/events.events.k8s.io")  # one Event store, two API groups (module doc)

# A run across regions puts one Lighthouse Service (an internal load balancer, one node port) in its home
# cluster's team namespace; the admission policy admits no other load balancer and no NodePort Service.
LIGHTHOUSES_PER_TEAM = 4

# The Service range is shared by the platform and every team: each team gets an even share of the
# addresses left once the platform has PLATFORM_SERVICES. The platform renders a few Services per cluster
# (Warden's in the tree; the charts Argo CD installs: Argo CD's, Kueue's webhook and metrics, KubeRay's
# operator; GKE's own kube-dns, metrics-server, default-http-backend: about 30, counted by hand, not by a
# test); 256 is many times that, room for what the platform adds.
PLATFORM_SERVICES = 256
# The least a team's share may be: a Service per job (a Job's headless Service, KubeRay's head Service
# of a RayJob or RayCluster) for 60 jobs, and the Lighthouses of its runs across regions.
MIN_TEAM_SERVICES = 64
# A Service range's network and broadcast addresses are never handed out (kube-apiserver's ClusterIP
# allocator, kubernetes pkg/registry/core/service/ipallocator, leaves out the first and last IPv4 address).
RESERVED_ADDRESSES = 2

# gkr's smallest pods: a GPU pod takes at least 1 GPU (gkr.spec gpus_per_pod >= 1 on a GPU pool) and a
# CPU pod at least 1 CPU (cpus_per_pod >= 1; KubeRay's submitter and gkr's Ray heads ask more).
GPU_PODS_PER_GPU = 1
CPU_PODS_PER_VCPU = 1
# Pods that exist without running: bare pods wait behind Kueue's scheduling gate (Jobs and RayJobs make
# none until admitted), terminating pods count until they are gone. As many again as can run.
POD_HEADROOM = 2
# A pod's life writes about a dozen distinct Events (Scheduled; Pulling, Pulled, Created, Started for each
# of its containers, gkr's preflight init container and GKE's gcsfuse sidecar included; Killing), plus its
# job's Kueue and KubeRay Events and the trainer's NCCLFailure reports. Repeats fold into one Event
# (client-go's EventCorrelator) and each is kept an hour (kube-apiserver --event-ttl): 16 per running pod.
EVENTS_PER_POD = 16
# Secrets: gkr renders two per run across regions in its home namespace (the Lighthouse's and the
# members' TLS identity, gkr/run_tls.py) and one in every other region it runs in; a team has at most
# LIGHTHOUSES_PER_TEAM runs homed in each region (services.loadbalancers). One-region jobs render none;
# KubeRay makes one per RayCluster only with authOptions, which gkr never sets. TEAM_SECRETS: the team's
# own (W&B, Hugging Face tokens: researchers may create Secrets) and what finished runs leave until
# `gkr delete`.
TEAM_SECRETS = 32
# ConfigMaps: gkr renders none and researchers may not create any (fleet.gitops.teams.researcher_role);
# kube-controller-manager writes kube-root-ca.crt into every namespace, a mesh its root certificate.
CONFIGMAPS = 16
# PVCs: gkr renders none, researchers may not create any, and KubeRay makes one only for a RayCluster
# with embedded GCS fault tolerance (ray-operator/controllers/ray/common/gcs_ft.go BuildGCSStoragePVC,
# KubeRay v1.7.0), which gkr never asks for. 0 also refuses the PVC of a pod's generic ephemeral volume.
PVCS = 0
# The workload objects a team writes (fleet.gitops.teams.researcher_role), counted as `count/<resource>.<group>`
# (the docs' form for any group, custom resources included). A Job, RayJob or RayCluster runs at least one pod
# once admitted and queued ones wait as objects: as many of each as the team may hold pods (`pods`). A RayJob
# also makes a RayCluster and, in K8sJobMode, a submitter Job. Deployments are only runs' Lighthouses.
WORKLOADS = ("count/jobs.batch", "count/rayjobs.ray.io", "count/rayclusters.ray.io")
DEPLOYMENTS = "count/deployments.apps"


def usable_services(services: IPv4Network) -> int:
    """Addresses a Service range hands out."""
    return services.num_addresses - RESERVED_ADDRESSES


def service_share(services: IPv4Network, teams: int) -> int:
    """Each team's even share of the Service range once the platform has its PLATFORM_SERVICES."""
    return max(0, usable_services(services) - PLATFORM_SERVICES) // max(1, teams)


def object_quota(fleet: Fleet, region: Region, services: IPv4Network, quota: TeamQuota) -> dict[str, int]:
    """The namespace's object counts of `quota`'s team in `region` (ResourceQuota `hard` names -> count), from
    the region's `services` range (the address plan's) and the team's quota plan there (module doc, constants)."""
    gpu_pods = quota.admissible[names.GPU_RESOURCE] * GPU_PODS_PER_GPU
    cpu_flavors = {p.name for p in region.cpu_pools}
    cpus = sum(q["cpu"] + quota.borrowing[f]["cpu"] for f, q in quota.nominal.items() if f in cpu_flavors)
    room = sum(p.max_nodes * p.max_pods_per_node for p in region.cpu_pools)  # the kubelets' own pod limit
    running = gpu_pods + min(cpus * CPU_PODS_PER_VCPU, room)
    # Runs' Secrets: L runs homed here (2 each) and L homed in each other region (1 each).
    run_secrets = LIGHTHOUSES_PER_TEAM * 2 + LIGHTHOUSES_PER_TEAM * (len(fleet.regions) - 1)
    derived = {
        "pods": POD_HEADROOM * running,
        "services": service_share(services, len(fleet.teams)),
        "secrets": run_secrets + TEAM_SECRETS,
        "configmaps": CONFIGMAPS,
        "persistentvolumeclaims": PVCS,
        "events": EVENTS_PER_POD * running,
    }
    given = next(t.objects for t in fleet.teams if t.name == quota.team).model_dump()
    counts = {key: given[key] if given.get(key) is not None else value for key, value in derived.items()}
    events = counts.pop("events")
    return {
        **counts,
        # Only runs' Lighthouses (internal load balancers; each one node port, which the Service quota counts
        # unless allocateLoadBalancerNodePorts is false); the admission policy refuses every other kind.
        "services.loadbalancers": LIGHTHOUSES_PER_TEAM,
        "services.nodeports": LIGHTHOUSES_PER_TEAM,
        **dict.fromkeys(EVENTS, events),
        **dict.fromkeys(WORKLOADS, counts["pods"]),
        DEPLOYMENTS: LIGHTHOUSES_PER_TEAM,
    }


def problems(fleet: Fleet, services: dict[str, IPv4Network]) -> list[Problem]:
    """Service counts a region's Service range cannot hand out (`services`: region -> its range)."""
    found = []
    for index, region in enumerate(fleet.regions):
        cidr = services[region.name]
        share = service_share(cidr, len(fleet.teams))
        wanted = [t.objects.services if t.objects.services is not None else share for t in fleet.teams]
        room = usable_services(cidr) - PLATFORM_SERVICES
        if share < MIN_TEAM_SERVICES and any(t.objects.services is None for t in fleet.teams):
            message = (
                f"the Service range {cidr} of {region.name} leaves each of {len(fleet.teams)} teams "
                f"{share:,} Services beyond the platform's {PLATFORM_SERVICES}, below {MIN_TEAM_SERVICES}; "
                "widen it (network.service_prefix) or set teams[].objects.services"
            )
        elif sum(wanted) > room:
            message = (
                f"teams' Services in {region.name} add up to {sum(wanted):,} but its Service range {cidr} "
                f"hands out {max(0, room):,} beyond the platform's {PLATFORM_SERVICES}; lower "
                "teams[].objects.services or widen the range (network.service_prefix)"
            )
        else:
            continue
        found.append(Problem(path=("regions", index, "name"), message=message))
    return found
