"""A RayJob turned into the RayCluster, pods and submitter KubeRay v1.7.0 creates for it (pure).

Read at 59d663aeec13760646da3db9c1cf8cfe883e30b7: rayjob_controller.go (initRayJobStatusIfNeed: the
submission id and the cluster's name; constructRayClusterForRayJob; getSubmitterTemplate,
configureSubmitterContainer, createNewK8sJob; reconcileServices: the RayJob's own head Service;
the dashboard address from utils.FetchHeadServiceURL), common/job.go (BuildJobSubmitCommand,
GetSubmitterTemplate, GetDefaultSubmitterContainer, BuildHeadServiceForRayJob) and
utils/validation.go (ValidateRayJobMetadata, ValidateRayJobSpec). The submitter Job's pod carries the
labels the API server adds to a Job's template (kubernetes pkg/registry/batch/job/strategy.go
generateSelector: `job-name`, `batch.kubernetes.io/job-name`; the controller-uid ones need a UID).
"""

from __future__ import annotations

import copy
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import safeyaml
from twin.golang import json_encode, quote, suffix, version_at_least
from twin.kuberay.cluster import ClusterPods, cluster_pods, read_object, service_names, service_ports
from twin.kuberay.spec import Where

K8S_JOB, SIDECAR, INTERACTIVE, HTTP = "K8sJobMode", "SidecarMode", "InteractiveMode", "HTTPMode"
SUBMITTER = "ray-job-submitter"  # utils.SubmitterContainerName
_ORIGIN = {"ray.io/originated-from-crd": "RayJob", "app.kubernetes.io/created-by": "kuberay-operator"}
_HEALTH = "python -c \"import urllib.request; r=urllib.request.urlopen('{url}', timeout=10); exit(0 if b'success' in r.read() else 1)\""


@dataclass(frozen=True)
class JobPods:
    """What KubeRay creates for one RayJob: its RayCluster and pods, and the submitter that runs the entrypoint.

    The RayCluster's name is `<rayjob>-<5 characters>` and the submission id `<rayjob>-<5 characters>`
    (unless spec.jobId); upstream both suffixes are random (rand.String(5)), here they are derived
    from the RayJob's namespace and name so every run names the same things.
    """

    name: str
    namespace: str
    raycluster: dict[str, Any]  # the RayCluster object the RayJob controller creates
    cluster: ClusterPods
    services: Mapping[str, str]  # the cluster's head Service and the RayJob's `<rayjob>-head-svc`, by DNS name
    submission_mode: str
    submission_id: str | None  # Status.JobId, RAY_JOB_SUBMISSION_ID; None in InteractiveMode without spec.jobId
    dashboard_url: str  # Status.DashboardURL, RAY_DASHBOARD_ADDRESS: head Service FQDN:dashboard port ("" if none)
    submitter_job: dict[str, Any] | None  # K8sJobMode: the batch/v1 Job
    submitter: dict[str, Any] | None  # K8sJobMode: the Job's pod; restartPolicy Never, retried backoffLimit times
    submitter_backoff_limit: int | None  # the Job's backoffLimit: spec.submitterConfig.backoffLimit, else 2
    shutdown_after_job_finishes: bool  # delete the RayCluster once the job ends
    ttl_seconds_after_finished: int  # ... this many seconds after
    backoff_limit: int  # spec.backoffLimit: whole-RayJob retries (a new RayCluster each), 0 by default
    active_deadline_seconds: int | None

    @property
    def pods(self) -> tuple[dict[str, Any], ...]:
        """The cluster's pods, then the submitter's pod where there is one."""
        return self.cluster.pods + ((self.submitter,) if self.submitter else ())


def rayjob_pods(rayjob: dict[str, Any]) -> JobPods:
    """Everything KubeRay v1.7.0 builds for `rayjob` once it is admitted (not suspended).

    Raises Rejected for what the API server or KubeRay refuses, Unsupported for what the twin does not
    model; both name the field.
    """
    meta = rayjob.get("metadata") if isinstance(rayjob, dict) else None
    namespace = meta.get("namespace") if isinstance(meta, dict) else None
    namespace = namespace if isinstance(namespace, str) and namespace else "default"  # utils.GetNamespace
    where, name, meta, spec = read_object(rayjob, namespace, "RayJob")
    mode = _check(where, spec)
    job_id = where.text(spec.get("jobId"), "spec.jobId")
    if not job_id and mode != INTERACTIVE:
        job_id = f"{name}-{suffix(f'{namespace}/{name}/submission')}"
    cluster_name = f"{name}-{suffix(f'{namespace}/{name}')}"
    raycluster = _raycluster(where, meta, spec, mode, (cluster_name, namespace), job_id)
    cluster = cluster_pods(raycluster, namespace, Where("RayJob", namespace, name, "spec.rayClusterSpec"))
    ports = service_ports(raycluster["spec"]["headGroupSpec"])
    if "dashboard" not in ports and mode == K8S_JOB:
        what = "the head Service has no port named dashboard, so KubeRay never creates the submitter"
        raise where.rejected("spec.rayClusterSpec.headGroupSpec.template", what, "name the 8265 port dashboard")
    dashboard = f"{cluster.head_service}:{ports['dashboard']}" if "dashboard" in ports else ""
    head = cluster.head["metadata"]["name"]
    own = dict.fromkeys(service_names(f"{name}-head-svc", namespace), head)  # BuildHeadServiceForRayJob
    job = _submitter_job(where, name, namespace, spec, raycluster, dashboard, job_id) if mode == K8S_JOB else None
    return JobPods(
        name=name,
        namespace=namespace,
        raycluster=raycluster,
        cluster=cluster,
        services=MappingProxyType({**cluster.services, **own}),
        submission_mode=mode,
        submission_id=job_id or None,
        dashboard_url=dashboard,
        submitter_job=job,
        submitter=_job_pod(job) if job else None,
        submitter_backoff_limit=job["spec"]["backoffLimit"] if job else None,
        shutdown_after_job_finishes=where.flag(spec.get("shutdownAfterJobFinishes"), "spec.shutdownAfterJobFinishes"),
        ttl_seconds_after_finished=_count(where, spec, "ttlSecondsAfterFinished") or 0,
        backoff_limit=_count(where, spec, "backoffLimit") or 0,
        active_deadline_seconds=_count(where, spec, "activeDeadlineSeconds"),
    )


def _count(where: Where, spec: dict[str, Any], field: str) -> int | None:
    return where.integer(spec.get(field), f"spec.{field}")


def _check(where: Where, spec: dict[str, Any]) -> str:
    """ValidateRayJobSpec's checks that matter here, and what the twin does not model; the submission mode."""
    mode = where.text(spec.get("submissionMode"), "spec.submissionMode", K8S_JOB)
    if mode not in (K8S_JOB, SIDECAR, INTERACTIVE, HTTP):
        raise where.rejected("spec.submissionMode", f"{mode!r} is not a submission mode", f"use {K8S_JOB}")
    refused = {
        "clusterSelector": "a RayJob on an existing cluster needs that cluster's pods; run its RayCluster instead",
        "deletionStrategy": "the deletion rules are not modelled; use shutdownAfterJobFinishes",
    }
    for field, what in refused.items():
        if spec.get(field):
            raise where.unsupported(f"spec.{field}", what, "drop it to run in the twin")
    if mode == HTTP:
        what = "the operator itself submits over HTTP; the twin has no operator"
        raise where.unsupported("spec.submissionMode", what, f"use {K8S_JOB}")
    if where.flag(spec.get("suspend"), "spec.suspend"):
        what = "KubeRay creates nothing for a suspended RayJob"
        raise where.unsupported("spec.suspend", what, "set it false (Kueue does on admission) to run it")
    if spec.get("rayClusterSpec") is None:
        raise where.rejected("spec.rayClusterSpec", "is missing", "describe the cluster to run the job on")
    for field in ("ttlSecondsAfterFinished", "backoffLimit"):
        if (_count(where, spec, field) or 0) < 0:
            raise where.rejected(f"spec.{field}", "is negative", "use 0 or more")
    for field in ("activeDeadlineSeconds", "preRunningDeadlineSeconds"):
        if (found := _count(where, spec, field)) is not None and found <= 0:
            raise where.rejected(f"spec.{field}", "must be a positive integer", "use 1 or more, or drop it")
    if mode == INTERACTIVE and (_count(where, spec, "backoffLimit") or 0) > 0:
        raise where.rejected("spec.backoffLimit", f"is incompatible with {INTERACTIVE}", "drop it")
    if mode == SIDECAR:
        for field in ("submitterPodTemplate", "submitterConfig"):
            if spec.get(field) is not None:
                raise where.rejected(f"spec.{field}", f"is not supported in {SIDECAR}", "drop it")
    return mode


def _raycluster(
    where: Where, meta: dict[str, Any], spec: dict[str, Any], mode: str, at: tuple[str, str], job_id: str
) -> dict[str, Any]:
    """constructRayClusterForRayJob: the RayJob's labels and annotations plus its origin and mode."""
    labels = {**meta["labels"], "ray.io/originated-from-cr-name": meta["name"], "ray.io/originated-from-crd": "RayJob"}
    labels["ray.io/job-submission-mode"] = mode
    annotations = dict(meta["annotations"])
    cluster_spec = copy.deepcopy(where.mapping(spec["rayClusterSpec"], "spec.rayClusterSpec"))
    if mode == SIDECAR:
        annotations["ray.io/disable-provisioned-head-restart"] = "true"
        _add_sidecar(where, spec, cluster_spec, job_id)
    metadata = {"name": at[0], "namespace": at[1], "labels": labels, "annotations": annotations}
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": metadata, "spec": cluster_spec}


def _add_sidecar(where: Where, spec: dict[str, Any], cluster_spec: dict[str, Any], job_id: str) -> None:
    """SidecarMode: the submitter runs beside the Ray container in the head pod, whose restartPolicy is Never.

    It reaches the dashboard on 127.0.0.1; RAY_DASHBOARD_ADDRESS is empty because the operator builds
    the container before the cluster has a dashboard address (getSubmitterContainer).
    """
    path = "spec.rayClusterSpec.headGroupSpec.template.spec"
    head = where.mapping(cluster_spec.get("headGroupSpec"), "spec.rayClusterSpec.headGroupSpec")
    template = where.mapping(head.get("template"), "spec.rayClusterSpec.headGroupSpec.template")
    pod_spec = where.mapping(template.get("spec"), path)
    containers = where.items(pod_spec.get("containers"), f"{path}.containers")
    if not containers:
        raise where.rejected(f"{path}.containers", "is empty", "the Ray container must come first")
    if pod_spec.get("restartPolicy") not in (None, "", "Never"):
        raise where.rejected(f"{path}.restartPolicy", f"must be Never or unset in {SIDECAR}", "drop it")
    ports = where.items(containers[0].get("ports"), f"{path}.containers[0].ports")
    port = next((p.get("containerPort") for p in ports if p.get("name") == "dashboard"), 8265)
    sidecar = _default_submitter(containers[0].get("image"))
    _configure(sidecar, _submit_command(where, spec, SIDECAR, f"http://127.0.0.1:{port}", job_id, port), "", job_id)
    pod_spec["containers"] = [*containers, sidecar]
    pod_spec["restartPolicy"] = "Never"


def _default_submitter(image: object) -> dict[str, Any]:
    """GetDefaultSubmitterContainer: the head's image (against version skew), 500m-1 CPU, 200Mi-1Gi."""
    container: dict[str, Any] = {"name": SUBMITTER}
    if image:
        container["image"] = image
    container["resources"] = {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "200Mi"}}
    return container


def _configure(container: dict[str, Any], command: list[str], dashboard: str, job_id: str, force: bool = True) -> None:
    """configureSubmitterContainer: `bash -ce` running the command (unless a submitterPodTemplate gave its own),
    then PYTHONUNBUFFERED, RAY_DASHBOARD_ADDRESS and RAY_JOB_SUBMISSION_ID appended to its env."""
    if force or not container.get("command"):
        container["command"] = ["/bin/bash", "-ce", "--"]  # GetContainerCommand(["e"]): stop at the first failure
        container["args"] = [" ".join(command)]
    env = container.setdefault("env", [])
    env.append({"name": "PYTHONUNBUFFERED", "value": "1"})
    env.append({"name": "RAY_DASHBOARD_ADDRESS", "value": dashboard})
    env.append({"name": "RAY_JOB_SUBMISSION_ID", "value": job_id})


def _submit_command(
    where: Where, spec: dict[str, Any], mode: str, address: str, job_id: str, port: object = None
) -> list[str]:
    """BuildJobSubmitCommand: wait for the GCS through the dashboard, then `ray job submit`.

    In K8sJobMode the Job may run again (backoffLimit), so it submits with --no-wait only if
    `ray job status` does not know the id yet, then follows the job's logs either way.
    """
    health = f"http://localhost:{port}/api/gcs_healthz" if mode == SIDECAR else f"{address}/api/gcs_healthz"
    waiting = quote(f"Waiting for Ray Dashboard GCS to become healthy at {address} ...")
    cmd = ["until", _HEALTH.format(url=health), ">/dev/null", "2>&1", ";"]
    cmd += ["do", "echo", waiting, ";", "sleep", "2", ";", "done", ";"]
    retried = mode == K8S_JOB  # SidecarSubmitterRestart is off by default
    if retried:
        cmd += ["if", "!", "ray", "job", "status", "--address", address, job_id, ">/dev/null", "2>&1", ";", "then"]
    cmd += ["ray", "job", "submit", "--address", address] + (["--no-wait"] if retried else [])
    cmd += _submit_options(where, spec, job_id)
    cmd += ["--", where.text(spec.get("entrypoint"), "spec.entrypoint").strip(), ";"]
    if retried:
        cmd += ["fi", ";", "ray", "job", "logs", "--address", address, "--follow", job_id]
    return cmd


def _submit_options(where: Where, spec: dict[str, Any], job_id: str) -> list[str]:
    """The runtime environment, metadata, submission id and entrypoint resources, in the operator's order."""
    options: list[str] = []
    runtime_env = where.text(spec.get("runtimeEnvYAML"), "spec.runtimeEnvYAML")
    if runtime_env:
        options += ["--runtime-env-json", quote(_runtime_env_json(where, runtime_env))]
    metadata = where.strings(spec.get("metadata"), "spec.metadata")
    if metadata:
        version = where.mapping(spec["rayClusterSpec"], "spec.rayClusterSpec").get("rayVersion") or ""
        if version and not version_at_least(str(version), (2, 6, 0)):
            raise where.rejected("spec.metadata", f"needs Ray 2.6.0 or later, not {version}", "drop it")
        options += ["--metadata-json", quote(json_encode(metadata))]
    if job_id:
        options += ["--submission-id", job_id]
    for field, flag in (("entrypointNumCpus", "--entrypoint-num-cpus"), ("entrypointNumGpus", "--entrypoint-num-gpus")):
        amount = spec.get(field)
        if amount is not None and (isinstance(amount, bool) or not isinstance(amount, int | float)):
            raise where.rejected(f"spec.{field}", f"is {amount!r}, not a number", "write a number")
        if amount is not None and amount > 0:
            single = struct.unpack("f", struct.pack("f", float(amount)))[0]  # the CRD's float32, printed with %f
            options += [flag, f"{single:f}"]
    resources = where.text(spec.get("entrypointResources"), "spec.entrypointResources")
    if resources:
        options += ["--entrypoint-resources", quote(resources)]
    return options


def _runtime_env_json(where: Where, text: str) -> str:
    """getRuntimeEnvJson: runtimeEnvYAML as compact JSON (sigs.k8s.io/yaml.YAMLToJSON, keys sorted)."""
    try:
        found = safeyaml.load(text)
    except safeyaml.YamlError as exc:
        raise where.rejected("spec.runtimeEnvYAML", f"is not YAML ({exc.message})", "fix the YAML") from None
    if found is not None and not isinstance(found, dict):
        raise where.rejected("spec.runtimeEnvYAML", "is not a mapping", "write a runtime environment mapping")
    try:
        return json_encode(found)
    except (TypeError, ValueError) as exc:
        raise where.unsupported("spec.runtimeEnvYAML", str(exc), "write strings, numbers and mappings") from None


def _submitter_job(
    where: Where,
    name: str,
    namespace: str,
    spec: dict[str, Any],
    raycluster: dict[str, Any],
    dashboard: str,
    job_id: str,
) -> dict[str, Any]:
    """createNewK8sJob over getSubmitterTemplate: the Job named as the RayJob, backoffLimit 2 unless
    spec.submitterConfig says otherwise; its template spec.submitterPodTemplate or the default."""
    custom = spec.get("submitterPodTemplate")
    if custom is not None:
        template = copy.deepcopy(where.mapping(custom, "spec.submitterPodTemplate"))
        pod_spec = where.mapping(template.get("spec"), "spec.submitterPodTemplate.spec")
        if not where.items(pod_spec.get("containers"), "spec.submitterPodTemplate.spec.containers"):
            raise where.rejected("spec.submitterPodTemplate.spec.containers", "is empty", "add the submitter container")
    else:
        image = raycluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0].get("image")
        template = {"spec": {"containers": [_default_submitter(image)], "restartPolicy": "Never"}}
    command = _submit_command(where, spec, K8S_JOB, f"http://{dashboard}", job_id)
    _configure(template["spec"]["containers"][0], command, dashboard, job_id, force=False)
    meta = template.setdefault("metadata", {})
    labels = where.strings(meta.get("labels"), "spec.submitterPodTemplate.metadata.labels")
    meta["labels"] = {**labels, "ray.io/originated-from-cr-name": name, **_ORIGIN}
    config = where.mapping(spec.get("submitterConfig"), "spec.submitterConfig")
    backoff = where.integer(config.get("backoffLimit"), "spec.submitterConfig.backoffLimit", 2)
    job_meta = {"name": name, "namespace": namespace, "labels": {"ray.io/originated-from-cr-name": name, **_ORIGIN}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": job_meta,
        "spec": {"backoffLimit": backoff, "template": template},
    }


def _job_pod(job: dict[str, Any]) -> dict[str, Any]:
    """The pod the Job controller creates from the Job's template, named `<job>-<5 characters>`."""
    template = copy.deepcopy(job["spec"]["template"])
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    meta = template.get("metadata") or {}
    labels = meta.setdefault("labels", {})
    for key in ("job-name", "batch.kubernetes.io/job-name"):
        labels.setdefault(key, name)  # generateSelector keeps a label the template already has
    meta.update(generateName=f"{name}-", namespace=namespace, name=f"{name}-{suffix(f'{namespace}/{name}/job')}")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}
