"""KubeRay v1.7.0's rules for the RayJobs and RayClusters Meridian renders, as a check over the objects.

What the operator refuses, read from `ray-operator/controllers/ray/utils/validation.go` at v1.7.0
(`ValidateRayJobMetadata`, `ValidateRayJobSpec`, `validateDeletionConfiguration`, `ValidateRayClusterMetadata`,
`ValidateRayClusterSpec`, `validateRayGroupResources`, `validateRayGroupLabels`; the limits in
`utils/constant.go` `MaxRayClusterNameLength` 53, `MaxRayJobNameLength` 53 - 6; unit tests
`utils/validation_test.go`), plus what it does with an accepted object that Meridian relies on:

- probes: a Ray container gets KubeRay's liveness and readiness probes, an HTTP GET of the dashboard agent's
  /api/healthz only when `spec.rayVersion` is 2.53.0 or later, else an exec of `wget` (`common/pod.go`
  `supportsUnifiedHealthCheck`, `initLivenessAndReadinessProbe`; `utils.BaseWgetHealthCommand`). The
  trainer image has no wget (found by `make twin`, issue 37): every Ray pod would stay unready.
- Kueue suspends what it manages: a suspended RayJob needs `shutdownAfterJobFinishes` (the first check of
  `ValidateRayJobSpec`), and a TTL after it keeps the cluster after Kueue freed its quota
  (fleet.controllers.kueue, rule ttl-after-finished).

What KubeRay does that no object can show (a Terminating worker pod counts as running and is not replaced,
`raycluster_controller.go` `reconcilePods`/`shouldDeletePod`) is in the goodput model's node-loss path
(fleet.goodput.nodeloss). Pure functions over object dicts: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from contract.names import RAYCLUSTER_NAME_MAX, RAYJOB_NAME_MAX, is_dns1035_label
from fleet.controllers.findings import Finding

Obj = Mapping[str, Any]

UNIFIED_PROBES = (2, 53, 0)  # common/pod.go supportsUnifiedHealthCheck
_START_RESOURCES = ("num-cpus", "num-gpus", "memory", "resources")  # validateRayGroupResources


def _version(text: str) -> tuple[int, ...] | None:
    """version.ParseGeneric: dotted numbers, at least major.minor; None when it does not parse."""
    match = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    return None if match is None else tuple(int(part or 0) for part in match.groups())


def _name(kind: str, meta: Obj, limit: int) -> Iterator[str]:
    name = str(meta.get("name", ""))
    if len(name) > limit:
        yield f"{kind} name should be no more than {limit} characters ({len(name)}): shorten it"
    if not is_dns1035_label(name):  # apimachinery's IsDNS1035Label, which holds its own 63
        yield f"{kind} name {name!r} should be a valid DNS-1035 label (lower case letters, digits and '-')"


def _group(name: str, group: Obj, autoscaling: bool) -> Iterator[str]:
    params = group.get("rayStartParams") or {}
    containers = ((group.get("template") or {}).get("spec") or {}).get("containers") or []
    if not containers:
        yield f"{name} group should have at least one container"
    if any(params.get(key) for key in _START_RESOURCES) and group.get("resources"):
        yield f"resources set in both rayStartParams and resources for the {name} group: use only one"
    if "labels" in params:
        yield f"rayStartParams['labels'] is not supported for the {name} group: use its top-level labels"
    if name == "head":
        return
    low, high = group.get("minReplicas"), group.get("maxReplicas")
    if not autoscaling and (low is None or high is None):
        yield f"worker group {name} must set both minReplicas and maxReplicas when autoscaling is disabled"
    elif low is not None and high is not None and low > high:
        yield f"worker group {name} has minReplicas {low} greater than maxReplicas {high}"


def cluster_spec_problems(spec: Obj) -> list[str]:
    """ValidateRayClusterSpec's refusals that apply to Meridian's objects, and the probes' version rule."""
    autoscaling = bool(spec.get("enableInTreeAutoscaling"))
    problems = list(_group("head", spec.get("headGroupSpec") or {}, autoscaling))
    for group in spec.get("workerGroupSpecs") or []:
        problems += _group(str(group.get("groupName", "")), group, autoscaling)
    found = _version(str(spec.get("rayVersion") or ""))
    if found is None or found < UNIFIED_PROBES:
        problems.append(
            f"rayVersion {spec.get('rayVersion')!r} is not 2.53.0 or later: KubeRay's probes then exec wget, "
            "which the trainer image lacks, and no Ray pod ever becomes ready; set spec.rayVersion"
        )
    return problems


def job_spec_problems(spec: Obj) -> list[str]:
    """ValidateRayJobSpec and validateDeletionConfiguration, for a RayJob that carries its cluster's spec."""
    problems = []
    shutdown = bool(spec.get("shutdownAfterJobFinishes"))
    if spec.get("suspend") and not shutdown:
        problems.append("a suspended RayJob needs shutdownAfterJobFinishes: true (Kueue creates it suspended)")
    ttl = spec.get("ttlSecondsAfterFinished") or 0
    if ttl < 0 or (ttl > 0 and not shutdown):
        problems.append("ttlSecondsAfterFinished must be >= 0 and needs shutdownAfterJobFinishes")
    selector = bool(spec.get("clusterSelector"))
    if spec.get("rayClusterSpec") is None and not selector:
        problems.append("one of rayClusterSpec or clusterSelector must be set")
    if selector and spec.get("suspend"):
        problems.append("a RayJob in clusterSelector mode cannot be suspended, so Kueue cannot run it")
    backoff = spec.get("backoffLimit")
    if backoff is not None and (backoff < 0 or (backoff > 0 and spec.get("submissionMode") == "InteractiveMode")):
        problems.append(f"backoffLimit {backoff} must be >= 0, and 0 in InteractiveMode (kuberay#3525)")
    for key in ("activeDeadlineSeconds", "preRunningDeadlineSeconds"):
        if spec.get(key) is not None and spec[key] <= 0:
            problems.append(f"{key} must be a positive integer")
    if spec.get("rayClusterSpec") is not None:
        problems += cluster_spec_problems(spec["rayClusterSpec"])
    return problems


def job_findings(o: Obj) -> list[Finding]:
    """What KubeRay v1.7.0 refuses, or runs without ready pods, in one rendered RayJob or RayCluster."""
    meta, spec = o.get("metadata") or {}, o.get("spec") or {}
    where = f"{o.get('kind')} {meta.get('namespace', '')}/{meta.get('name', '')}"
    if o.get("kind") == "RayJob":
        problems = [*_name("RayJob", meta, RAYJOB_NAME_MAX), *job_spec_problems(spec)]
    elif o.get("kind") == "RayCluster":
        problems = [*_name("RayCluster", meta, RAYCLUSTER_NAME_MAX), *cluster_spec_problems(spec)]
    else:
        return []
    return [Finding(where, "kuberay", problem) for problem in problems]
