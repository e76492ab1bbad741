"""Kueue v0.19.2's admission rules (fleet.controllers.kueue) on small hand-made objects, one rule at a time."""

from __future__ import annotations

from fractions import Fraction

from fleet.controllers import kueue
from fleet.controllers.kueue import Cluster
from fleet.controllers.podsets import PodSet, workload
from tests.controllers.objects import (
    GKE_LEVELS,
    POOL,
    Obj,
    cluster_queue,
    flavor,
    job,
    local_queue,
    namespace,
    pod,
    quota,
    rayjob,
    topology,
    values,
)

BLOCK, SUBBLOCK = GKE_LEVELS[0], GKE_LEVELS[1]


def objects(tas_cpu: bool = True, flex: bool = True) -> list[Obj]:
    """A cluster like Meridian's: a CPU flavor, an H200 reservation and flex-start flavors, one team queue."""
    flavors = [quota("cpu", 0, 2048, 8192), quota("h200-a", 1024, 28672, 377856)]
    if flex:
        flavors.append(quota("h200-flex", 512, 14336, 188928))
    return [
        topology("gke-default", *GKE_LEVELS),
        topology("hostname", "kubernetes.io/hostname"),
        flavor("cpu", "hostname" if tas_cpu else None),
        flavor("h200-a", "gke-default"),
        flavor("h200-flex", "gke-default"),
        cluster_queue("a", *flavors),
        local_queue("q", "a"),
        namespace(),
    ]


def cluster(tas_cpu: bool = True, flex: bool = True, extra: list[Obj] | None = None) -> Cluster:
    return kueue.cluster([*objects(tas_cpu, flex), *(extra or [])], values())


def only(o: Obj) -> PodSet:
    w = workload(o)
    assert w is not None
    (podset,) = w.podsets
    return podset


def rules(c: Cluster, o: Obj, pool: str | None = None) -> list[str]:
    return [f.rule for f in kueue.job_findings(c, o, pool)]


def test_a_gpu_podset_without_topology_is_never_admitted_in_a_queue_that_mixes_the_cpu_flavor() -> None:
    # The finding of issue 38: the cpu flavor names no Topology, so the queue is not TAS-only; the PodSet asks
    # for no topology, so it may not use the H200 flavors, and the cpu flavor holds no GPU.
    worker = pod(gpus=8)
    (finding,) = kueue.job_findings(cluster(tas_cpu=False), job(worker, pods=16))
    assert finding.rule == "never-admitted"
    assert "h200-a takes only topology-aware PodSets and the queue is not TAS-only" in finding.message
    assert "cpu: 128 nvidia.com/gpu is more than the queue can get (0)" in finding.message
    # The same PodSet with a topology request is admitted there, and without one once every flavor is TAS.
    asked = pod(gpus=8, annotations={"kueue.x-k8s.io/podset-preferred-topology": BLOCK})
    assert rules(cluster(tas_cpu=False), job(asked, pods=16)) == []
    assert rules(cluster(tas_cpu=True), job(worker, pods=16)) == []


def test_a_mixed_queue_is_a_config_finding() -> None:
    assert [f.rule for f in kueue.config_findings(cluster(tas_cpu=False))] == ["tas-mixed-queue"]
    assert kueue.config_findings(cluster(tas_cpu=True)) == []


def test_an_explicit_level_needs_a_flavor_whose_topology_has_it() -> None:
    # The cpu flavor's Topology has only the hostname: a block request skips it (and may not use it at all).
    cpu_block = pod(
        gpus=0,
        cpu="4",
        memory="16Gi",
        selector={POOL: "cpu"},
        annotations={"kueue.x-k8s.io/podset-required-topology": BLOCK},
    )
    (finding,) = kueue.job_findings(cluster(), job(cpu_block))
    assert "cpu's Topology hostname has no level cloud.google.com/gce-topology-block" in finding.message
    on_host = pod(
        gpus=0,
        cpu="4",
        memory="16Gi",
        selector={POOL: "cpu"},
        annotations={"kueue.x-k8s.io/podset-required-topology": "kubernetes.io/hostname"},
    )
    assert rules(cluster(), job(on_host)) == []
    # A slice-only request spans the widest level and needs its slice level; unconstrained: false names none.
    sliced = pod(
        selector={POOL: "h200-a"},
        annotations={
            "kueue.x-k8s.io/podset-slice-required-topology": SUBBLOCK,
            "kueue.x-k8s.io/podset-slice-size": "2",
        },
    )
    assert rules(cluster(), job(sliced, pods=4)) == []
    sliced["metadata"]["annotations"]["kueue.x-k8s.io/podset-slice-required-topology"] = "rack"
    (finding,) = kueue.job_findings(cluster(), job(sliced, pods=4))
    assert "h200-a's Topology gke-default has no level rack" in finding.message
    never = pod(selector={POOL: "h200-a"}, annotations={"kueue.x-k8s.io/podset-unconstrained-topology": "false"})
    assert rules(cluster(), job(never)) == ["never-admitted"]


def test_an_explicit_request_may_not_use_a_flavor_without_topology_for_the_resources_it_covers() -> None:
    asked = pod(gpus=0, cpu="4", memory="16Gi", annotations={"kueue.x-k8s.io/podset-required-topology": BLOCK})
    c = cluster(tas_cpu=False)
    queue = c.queues["a"]
    ps = only(job(asked))
    assert (
        kueue.misfit(c, queue, ps, "cpu", queue["spec"]["resourceGroups"][0], {"cpu": Fraction(4)})
        == "cpu is not topology-aware"
    )


def test_the_node_selector_is_matched_on_the_flavors_own_labels_only() -> None:
    c = cluster()
    queue = c.queues["a"]
    on_flex = pod(selector={POOL: "h200-flex", "cloud.google.com/gke-accelerator": "nvidia-h200-141gb"})
    ps = only(job(on_flex))
    requests = {"nvidia.com/gpu": Fraction(8)}
    assert kueue.admitting(c, queue, ps, requests) == ["h200-flex"]
    anywhere = pod(selector={"cloud.google.com/gke-accelerator": "nvidia-h200-141gb"})
    ps = only(job(anywhere))
    assert kueue.admitting(c, queue, ps, requests) == ["h200-a", "h200-flex"]  # never cpu: no GPU quota


def test_required_node_affinity_counts_and_terms_without_flavor_keys_match_every_flavor() -> None:
    spec = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": POOL, "operator": "In", "values": ["h200-a"]}]}]
                }
            }
        }
    }
    assert kueue.flavor_selects(spec, {POOL: "h200-a"})
    assert not kueue.flavor_selects(spec, {POOL: "h200-flex"})
    other = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": POOL, "operator": "NotIn", "values": ["h200-a"]}]},
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                    ]
                }
            }
        }
    }
    assert kueue.flavor_selects(other, {POOL: "h200-a"})  # the second term no longer constrains the flavor


def test_a_gpu_podset_that_names_a_pool_but_selects_only_the_accelerator_is_not_held_to_it() -> None:
    anywhere = pod(selector={"cloud.google.com/gke-accelerator": "nvidia-h200-141gb"})
    findings = kueue.job_findings(cluster(), job(anywhere, pods=16), pool="h200-flex")
    (finding,) = findings
    assert finding.rule == "pool-not-enforced"
    assert "flavors h200-a, h200-flex admit it" in finding.message
    selected = pod(selector={POOL: "h200-flex"})
    assert rules(cluster(), job(selected, pods=16), pool="h200-flex") == []
    # Another pool's flavor taking it is the same finding: the flex pool does not exist in this cluster.
    assert rules(cluster(flex=False), job(anywhere, pods=16), pool="h200-flex") == ["pool-not-enforced"]


def test_quota_is_what_the_queue_could_ever_get_nominal_and_cohort_capped_by_the_borrowing_limit() -> None:
    mine = cluster_queue("a", quota("h200-a", 64, 1792, 23616, borrowing=(64, 1792, 23616)))
    other = cluster_queue("b", quota("h200-a", 256, 7168, 94464), namespace="team-b")
    cohort = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Cohort",
        "metadata": {"name": "c"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [{"name": "h200-a", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 64}]}],
                }
            ]
        },
    }
    base = [topology("gke-default", *GKE_LEVELS), flavor("h200-a", "gke-default"), local_queue("q", "a"), namespace()]
    c = kueue.cluster([*base, mine, other, cohort], values())
    assert kueue.potential(c, mine, "h200-a", "nvidia.com/gpu") == 128  # capped: 64 + borrowing 64
    for resource in mine["spec"]["resourceGroups"][0]["flavors"][0]["resources"]:
        del resource["borrowingLimit"]
    c = kueue.cluster([*base, mine, other, cohort], values())
    assert kueue.potential(c, mine, "h200-a", "nvidia.com/gpu") == 64 + 256 + 64  # the whole cohort
    forty_eight_nodes = job(pod(gpus=8, cpu="100", memory="100Gi"), pods=48)
    assert rules(c, forty_eight_nodes) == []
    (finding,) = kueue.job_findings(c, job(pod(gpus=8, cpu="100", memory="100Gi"), pods=49))
    assert "392 nvidia.com/gpu is more than the queue can get (384)" in finding.message


def test_podsets_of_one_workload_share_the_flavor_quota_in_order() -> None:
    # Each group alone fits 1,024 GPUs; together (the head on cpu) the second group does not.
    worker = pod(gpus=8, selector={POOL: "h200-a"})
    two = rayjob(worker, replicas=64)
    two["spec"]["rayClusterSpec"]["workerGroupSpecs"].append({"groupName": "more", "replicas": 65, "template": worker})
    (finding,) = kueue.job_findings(cluster(flex=False), two)
    assert (finding.rule, finding.where) == ("never-admitted", "RayJob team-a/rj PodSet more (65 pods)")


def test_a_resource_no_group_covers_is_never_admitted() -> None:
    template = pod(gpus=0, cpu="1", memory="1Gi", selector={POOL: "cpu"})
    template["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = "10Gi"
    (finding,) = kueue.job_findings(cluster(), job(template))
    assert "resource ephemeral-storage unavailable in ClusterQueue a" in finding.message


def test_a_slice_size_that_does_not_divide_the_count_leaves_pods_without_a_domain() -> None:
    sliced = pod(
        selector={POOL: "h200-a"},
        annotations={
            "kueue.x-k8s.io/podset-required-topology": BLOCK,
            "kueue.x-k8s.io/podset-slice-required-topology": SUBBLOCK,
            "kueue.x-k8s.io/podset-slice-size": "4",
        },
    )
    assert rules(cluster(), rayjob(sliced, replicas=32)) == []
    (finding,) = kueue.job_findings(cluster(), rayjob(sliced, replicas=34))
    assert finding.rule == "slice-size"
    assert "places 8 whole slices and leaves 2 pods" in finding.message


def test_a_kueue_rayjob_with_a_ttl_after_finishing_holds_nodes_after_its_quota_is_released() -> None:
    worker = pod(selector={POOL: "h200-a"})
    assert rules(cluster(), rayjob(worker, ttlSecondsAfterFinished=0)) == []
    assert rules(cluster(), rayjob(worker, ttlSecondsAfterFinished=3600)) == ["ttl-after-finished"]


def test_a_job_in_a_namespace_kueue_does_not_manage_waits_for_ever() -> None:
    # Warden's sweep Jobs: queue-named and created suspended, in a namespace managedJobsNamespaceSelector
    # does not select (ManagedJobsNamespaceSelectorAlwaysRespected, GA in 0.19).
    warden = namespace("warden", team=False)
    c = kueue.cluster([*objects(), warden, local_queue("q", "a", "warden")], values())
    sweep = job(pod(selector={POOL: "h200-a"}), namespace="warden")
    assert rules(c, sweep) == ["never-managed"]
    free = job(pod(gpus=0, cpu="1", memory="1Gi"), queue=None, namespace="warden")
    free["spec"]["suspend"] = False
    assert rules(c, free) == []  # not Kueue's and not waiting for it


def test_the_queue_must_exist_and_take_the_namespace() -> None:
    worker = pod(selector={POOL: "h200-a"})
    assert rules(cluster(), job(worker, queue=None)) == ["no-queue"]
    assert rules(cluster(), job(worker, queue="missing")) == ["no-queue"]
    other = namespace("team-b")
    c = cluster(extra=[other, local_queue("q", "a", "team-b")])
    (finding,) = kueue.job_findings(c, job(worker, namespace="team-b"))
    assert "does not take workloads from namespace team-b" in finding.message


def test_objects_kueue_does_not_manage_have_no_findings() -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "team-a"}}
    assert kueue.job_findings(cluster(), service) == []


def test_a_flavor_naming_a_missing_topology_leaves_its_queue_inactive() -> None:
    c = kueue.cluster([o for o in objects() if o["metadata"]["name"] != "hostname"], values())
    assert [f.rule for f in kueue.config_findings(c)] == ["missing-topology"]
