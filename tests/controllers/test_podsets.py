"""The Workload Kueue makes of each kind of job (fleet.controllers.podsets)."""

from __future__ import annotations

from fleet.controllers.podsets import Topology, topology, workload
from tests.controllers.objects import POOL, job, pod, rayjob


def test_a_job_is_one_podset_of_parallelism_pods_at_most_completions() -> None:
    o = job(pod(), pods=4)
    o["spec"]["completions"] = 3
    (main,) = workload(o).podsets  # type: ignore[union-attr]
    assert (main.name, main.count) == ("main", 3)


def test_a_rayjob_is_head_worker_groups_and_the_default_submitter() -> None:
    o = rayjob(pod(selector={POOL: "h200-a"}), replicas=16)
    o["spec"]["rayClusterSpec"]["workerGroupSpecs"].append(
        {"groupName": "Generators", "replicas": 2, "numOfHosts": 2, "template": pod()}
    )
    w = workload(o)
    assert w is not None
    assert [(p.name, p.count) for p in w.podsets] == [("head", 1), ("workers", 16), ("generators", 4), ("submitter", 1)]
    submitter = w.podsets[-1]
    # KubeRay's default submitter: the head's image, 500m and 200Mi requested, and no node selector.
    (container,) = submitter.spec["containers"]
    assert container["resources"]["requests"] == {"cpu": "500m", "memory": "200Mi"}
    assert "nodeSelector" not in submitter.spec


def test_other_submission_modes_and_existing_clusters() -> None:
    sidecar = workload(rayjob(pod(), submissionMode="SidecarMode"))
    assert sidecar is not None
    assert [p.name for p in sidecar.podsets] == ["head", "workers"]
    assert len(sidecar.podsets[0].spec["containers"]) == 2  # the submitter runs in the head
    http = workload(rayjob(pod(), submissionMode="HTTPMode"))
    assert [p.name for p in http.podsets] == ["head", "workers"]  # type: ignore[union-attr]
    custom = rayjob(pod(), submitterPodTemplate=pod(gpus=0, cpu="1", memory="1Gi", selector={POOL: "cpu"}))
    assert workload(custom).podsets[-1].spec["nodeSelector"] == {POOL: "cpu"}  # type: ignore[union-attr]
    existing = rayjob(pod(), clusterSelector={"ray.io/cluster": "x"})
    del existing["spec"]["rayClusterSpec"]
    assert workload(existing) is None  # Kueue skips it (rayjob_controller.go:116 Skip)


def test_a_deployments_pods_carry_its_queue_name() -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "team-a", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {"replicas": 1, "template": pod(gpus=0, cpu="1", memory="1Gi")},
    }
    w = workload(deployment)
    assert w is not None
    assert w.queue == "q"
    assert [(p.name, p.count) for p in w.podsets] == [("main", 1)]


def test_topology_requests_as_kueue_builds_them() -> None:
    assert topology({}) == Topology()
    assert not Topology().explicit
    required = topology({"kueue.x-k8s.io/podset-required-topology": "block", "kueue.x-k8s.io/podset-group-name": "g"})
    assert required.explicit
    assert (required.level, required.group) == ("block", "g")
    # Required wins over preferred; a group without either is dropped; a slice needs its size.
    both = topology({"kueue.x-k8s.io/podset-required-topology": "a", "kueue.x-k8s.io/podset-preferred-topology": "b"})
    assert (both.required, both.preferred) == ("a", None)
    assert topology({"kueue.x-k8s.io/podset-group-name": "g"}).group is None
    assert not topology({"kueue.x-k8s.io/podset-slice-required-topology": "subblock"}).explicit
    sliced = topology(
        {"kueue.x-k8s.io/podset-slice-required-topology": "subblock", "kueue.x-k8s.io/podset-slice-size": "2"}
    )
    assert sliced.explicit
    assert (sliced.slice_level, sliced.slice_size) == ("subblock", 2)
    assert topology({"kueue.x-k8s.io/podset-unconstrained-topology": "false"}).explicit
