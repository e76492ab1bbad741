"""KubeRay v1.7.0's refusals (utils/validation.go) and its probes' version rule (common/pod.go), one at a time."""

from __future__ import annotations

from typing import Any

from fleet.controllers import kuberay

Obj = dict[str, Any]


def _group(name: str, **extra: Any) -> Obj:
    return {"groupName": name, "template": {"spec": {"containers": [{"name": "ray"}]}}, **extra}


def _cluster_spec(**extra: Any) -> Obj:
    workers = [_group("workers", minReplicas=2, maxReplicas=2, replicas=2)]
    return {"rayVersion": "2.60.0", "headGroupSpec": _group("head"), "workerGroupSpecs": workers, **extra}


def _job(name: str = "sft", **spec: Any) -> Obj:
    base = {"suspend": True, "shutdownAfterJobFinishes": True, "rayClusterSpec": _cluster_spec()}
    return {"kind": "RayJob", "metadata": {"name": name, "namespace": "team-a"}, "spec": {**base, **spec}}


def _problems(o: Obj) -> list[str]:
    return [f.message for f in kuberay.job_findings(o)]


def test_what_meridian_renders_passes() -> None:
    assert _problems(_job(backoffLimit=2, activeDeadlineSeconds=3600)) == []
    cluster = {"kind": "RayCluster", "metadata": {"name": "c" * 53}, "spec": _cluster_spec()}
    assert _problems(cluster) == []


def test_names_longer_than_the_operator_takes_or_not_dns_1035() -> None:
    assert _problems(_job("j" * 47)) == []
    assert _problems(_job("j" * 48)) == ["RayJob name should be no more than 47 characters (48): shorten it"]
    assert len(_problems(_job("1-job"))) == 1
    assert len(_problems({"kind": "RayCluster", "metadata": {"name": "c" * 54}, "spec": _cluster_spec()})) == 1


def test_a_suspended_rayjob_needs_shutdown_and_a_ttl_needs_it_too() -> None:
    assert len(_problems(_job(shutdownAfterJobFinishes=False))) == 1
    assert len(_problems(_job(suspend=False, shutdownAfterJobFinishes=False, ttlSecondsAfterFinished=60))) == 1
    assert _problems(_job(ttlSecondsAfterFinished=60)) == []  # KubeRay takes it; Kueue's rule refuses it


def test_retries_deadlines_and_the_cluster_selector() -> None:
    assert len(_problems(_job(submissionMode="InteractiveMode", backoffLimit=1))) == 1
    assert _problems(_job(submissionMode="InteractiveMode", backoffLimit=0)) == []
    assert len(_problems(_job(backoffLimit=-1))) == 1
    assert len(_problems(_job(activeDeadlineSeconds=0))) == 1
    assert len(_problems(_job(rayClusterSpec=None))) == 1
    assert len(_problems(_job(rayClusterSpec=None, clusterSelector={"ray.io/cluster": "c"}))) == 1


def test_worker_groups_and_ray_start_params() -> None:
    unset = _cluster_spec(workerGroupSpecs=[_group("workers", replicas=2)])
    assert _problems(_job(rayClusterSpec=unset)) == [
        "worker group workers must set both minReplicas and maxReplicas when autoscaling is disabled"
    ]
    assert _problems(_job(rayClusterSpec={**unset, "enableInTreeAutoscaling": True})) == []
    crossed = _cluster_spec(workerGroupSpecs=[_group("workers", minReplicas=3, maxReplicas=2)])
    assert len(_problems(_job(rayClusterSpec=crossed))) == 1
    both = _cluster_spec(headGroupSpec=_group("head", rayStartParams={"num-cpus": "0"}, resources={"cpu": "1"}))
    assert len(_problems(_job(rayClusterSpec=both))) == 1
    labels = _cluster_spec(headGroupSpec=_group("head", rayStartParams={"labels": "a=b"}))
    assert len(_problems(_job(rayClusterSpec=labels))) == 1
    empty = _cluster_spec(headGroupSpec={"template": {"spec": {"containers": []}}})
    assert _problems(_job(rayClusterSpec=empty)) == ["head group should have at least one container"]


def test_probes_exec_wget_below_ray_2_53_or_without_a_version() -> None:
    for version in (None, "", "2.52.1", "latest"):
        assert len(_problems(_job(rayClusterSpec=_cluster_spec(rayVersion=version)))) == 1, version
    for version in ("2.53.0", "2.60", "3.0.1"):
        assert _problems(_job(rayClusterSpec=_cluster_spec(rayVersion=version))) == [], version
