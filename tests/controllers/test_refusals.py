"""What Kueue's webhooks refuse at creation (fleet.controllers.refusals)."""

from __future__ import annotations

from fleet.controllers import refusals
from fleet.controllers.podsets import Workload, workload
from tests.controllers.objects import POOL, Obj, pod, rayjob

BLOCK = "cloud.google.com/gce-topology-block"


def _why(o: Obj) -> list[str]:
    w = workload(o)
    assert isinstance(w, Workload)
    return [f.message.removeprefix("Kueue's webhook refuses it: ") for f in refusals.findings(w)]


def test_a_kueue_rayjob_must_delete_its_cluster_and_not_autoscale() -> None:
    assert _why(rayjob(pod())) == []
    assert _why(rayjob(pod(), shutdownAfterJobFinishes=False)) == [
        "shutdownAfterJobFinishes must be true: Kueue needs the cluster deleted when the job ends"
    ]
    auto = rayjob(pod())
    auto["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] = True
    assert _why(auto) == ["enableInTreeAutoscaling: a Kueue job autoscales only with workload slicing; turn it off"]


def test_a_kueue_rayjob_with_both_a_cluster_selector_and_a_cluster_spec_is_refused() -> None:
    """rayjob_webhook.go:117 refuses it before the controller's Skip (rayjob_controller.go:116) could apply."""
    assert _why(rayjob(pod(), clusterSelector={"ray.io/cluster": "x"})) == [
        "clusterSelector with rayClusterSpec: a Kueue job may not use an existing cluster"
    ]


def test_at_most_seventeen_worker_groups_and_none_named_head() -> None:
    many = rayjob(pod())
    groups = many["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    groups += [{"groupName": f"g{i}", "replicas": 1, "template": pod()} for i in range(16)]
    assert _why(many) == []
    groups.append({"groupName": "head", "replicas": 1, "template": pod()})
    assert _why(many) == [
        "19 PodSets (head and worker groups): a Workload holds at most 18",
        "a worker group is named head, which Kueue keeps for the head group",
    ]


def test_topology_annotations() -> None:
    both = pod(
        annotations={
            "kueue.x-k8s.io/podset-required-topology": BLOCK,
            "kueue.x-k8s.io/podset-preferred-topology": BLOCK,
        }
    )
    assert len(_why(rayjob(both))) == 1
    too_big = pod(
        annotations={
            "kueue.x-k8s.io/podset-slice-required-topology": BLOCK,
            "kueue.x-k8s.io/podset-slice-size": "4",
        }
    )
    assert _why(rayjob(too_big, replicas=4)) == []
    assert _why(rayjob(too_big, replicas=2)) == [
        "PodSet workers: kueue.x-k8s.io/podset-slice-size '4' must be a number from 1 to the PodSet's 2 pods"
    ]


def test_podset_groups_are_pairs_with_a_single_pod_side_and_one_level() -> None:
    def grouped(level: str = BLOCK) -> Obj:
        return pod(
            selector={POOL: "h200-a"},
            annotations={"kueue.x-k8s.io/podset-required-topology": level, "kueue.x-k8s.io/podset-group-name": "g"},
        )

    o = rayjob(grouped(), replicas=2)
    assert _why(o) == ["PodSet group g has 1 PodSets: a group is exactly 2"]
    o["spec"]["rayClusterSpec"]["workerGroupSpecs"].append({"groupName": "gen", "replicas": 1, "template": grouped()})
    assert _why(o) == []
    o["spec"]["rayClusterSpec"]["workerGroupSpecs"][1]["replicas"] = 2  # two groups of 2 (grpo-8b's shape)
    assert _why(o) == ["PodSet group g: 2 and 2 pods; one PodSet must be a single pod"]
