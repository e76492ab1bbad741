"""The shapes of the objects gkr makes: a pod template, a RayJob, a RayCluster, an indexed Job and its Service (pure).

gkr.render decides every value (from the job and the fleet's pool and machine definitions);
this module only places them: the objects' own keys in the order they are printed, each value
placed as `_json` gives it. Objects are built as data, never as text, so no value from a job
file (an image, an env value, a command) can change their structure.
"""

from __future__ import annotations

import json
from typing import Any

Pod = dict[str, Any]  # a pod's parts, as gkr.render.pod fills them in
# num-cpus 0: Ray schedules no task or actor on the head, which holds the GCS, the dashboard and the driver;
# training groups go to the workers, whose loss the run survives (Ray docs, RayCluster Configuration,
# rayStartParams: https://docs.ray.io/en/latest/cluster/kubernetes/user-guides/config.html).
HEAD_START_PARAMS = {"num-cpus": "0"}


def _json(value: Any) -> Any:
    """A value as the cluster gets it: JSON's types, mappings' keys sorted, a copy no other object shares.

    Shared, PyYAML would print it as an alias; a later change to one object (a run's labels) would
    reach the others.
    """
    return json.loads(json.dumps(value, sort_keys=True))


def metadata(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": _json(labels)}


def pod_template(pod: Pod, container: str, command: list[str] | None = None) -> dict[str, Any]:
    """A pod template; `command`: the Job's; Ray containers get pod["command"], which KubeRay runs before `ray start`."""
    command = command or pod["command"]
    spec: dict[str, Any] = {"serviceAccountName": pod["service_account"]}
    if pod["security_context"]:
        spec["securityContext"] = _json(pod["security_context"])
    spec.update((key, _json(value)) for key, value in pod["spec_extra"].items())  # in render's order
    for key, part in (
        ("nodeSelector", "node_selector"),
        ("tolerations", "tolerations"),
        ("initContainers", "init_containers"),
    ):
        spec[key] = _json(pod[part])
    main: dict[str, Any] = {"name": container, "image": pod["image"]}
    if command:
        main["command"] = _json(command)
    main["securityContext"] = {"allowPrivilegeEscalation": False}
    for key, part in (("env", "env"), ("resources", "resources"), ("volumeMounts", "mounts")):
        main[key] = _json(pod[part])
    if pod["ports"]:
        main["ports"] = _json(pod["ports"])
    spec.update(containers=[main], volumes=_json(pod["volumes"]))
    return {"metadata": {"labels": _json(pod["labels"]), "annotations": _json(pod["annotations"])}, "spec": spec}


def worker_group(name: str, pods: int, params: dict[str, Any], pod: Pod) -> dict[str, Any]:
    """A Ray worker group of a fixed size: every pod of it is part of the job's one gang."""
    return {
        "groupName": name,
        "replicas": pods,
        "minReplicas": pods,
        "maxReplicas": pods,
        "rayStartParams": _json(params),
        "template": pod_template(pod, "ray-worker"),
    }


def ray_cluster_spec(ray_version: str, head: Pod, groups: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "rayVersion": ray_version,
        "headGroupSpec": {"rayStartParams": dict(HEAD_START_PARAMS), "template": pod_template(head, "ray-head")},
        "workerGroupSpecs": groups,
    }


def rayjob(meta: dict[str, Any], job: dict[str, Any], cluster: dict[str, Any]) -> dict[str, Any]:
    """`job`: the RayJob's own settings (entrypoint, shutdown, retries, deadline, submission mode), in order."""
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta, "spec": {**job, "rayClusterSpec": cluster}}


def raycluster(meta: dict[str, Any], cluster: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta, "spec": cluster}


def indexed_job(meta: dict[str, Any], pods: int, worker: Pod, command: list[str]) -> list[dict[str, Any]]:
    """An indexed Job; the headless Service gives pod 0 a stable name for the rendezvous."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(**meta),
        "spec": {"clusterIP": "None", "selector": {"job-name": meta["name"]}},
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(**meta),
        "spec": {
            "completionMode": "Indexed",
            "completions": pods,
            "parallelism": pods,
            "backoffLimit": 0,
            "template": pod_template(worker, "main", command),
        },
    }
    return [service, job]
