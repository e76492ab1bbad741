"""What Kueue v0.19.2's webhooks refuse when a job is created in a namespace it manages (pure).

- RayJob (`pkg/controller/jobs/rayjob/rayjob_webhook.go` `validateCreate`): a `clusterSelector` together
  with a `rayClusterSpec`; no `rayClusterSpec`; `shutdownAfterJobFinishes` not true ("a kueue managed job
  should delete the cluster after finishing").
- RayJob and RayCluster (`pkg/controller/jobs/raycluster/common.go` `ValidateCreate`): the in-tree
  autoscaler (without workload slicing, which Meridian does not enable); more PodSets than a Workload holds
  (`pkg/controller/jobframework/constants.go` MaxPodSets, 18: the head and 17 worker groups, the submitter
  counted for a RayJob only at admission); a worker group named `head`.
- Every PodSet's topology annotations (`pkg/controller/jobframework/tas_validation.go`
  `ValidateTASPodSetRequest`, `ValidateSliceSizeAnnotationUpperBound`, `ValidatePodSetGroupingTopology`):
  at most one of required, preferred and unconstrained; a slice level needs a slice size and the reverse; a
  slice size of at least 1 and at most the PodSet's count; a PodSet group only with required or preferred and
  no slice; a group of exactly two PodSets, one of them a single pod, with the same required or preferred
  level.
"""

from __future__ import annotations

from collections import defaultdict

from fleet.controllers.findings import Finding
from fleet.controllers.podsets import (
    GROUP,
    PREFERRED,
    REQUIRED,
    SLICE_LEVEL,
    SLICE_SIZE,
    UNCONSTRAINED,
    PodSet,
    Workload,
)

MAX_PODSETS = 18  # pkg/controller/jobframework/constants.go MaxPodSets


def _ray(w: Workload) -> list[str]:
    spec = w.source.get("spec") or {}
    cluster = spec if w.kind == "RayCluster" else spec.get("rayClusterSpec")
    found = []
    if w.kind == "RayJob":
        if spec.get("clusterSelector") and cluster:
            found.append("clusterSelector with rayClusterSpec: a Kueue job may not use an existing cluster")
        if not cluster:
            found.append("rayClusterSpec is required for a Kueue-managed RayJob")
        if spec.get("shutdownAfterJobFinishes") is not True:
            found.append("shutdownAfterJobFinishes must be true: Kueue needs the cluster deleted when the job ends")
    cluster = cluster or {}
    if cluster.get("enableInTreeAutoscaling") is True:
        found.append("enableInTreeAutoscaling: a Kueue job autoscales only with workload slicing; turn it off")
    groups = cluster.get("workerGroupSpecs") or []
    if len(groups) + 1 > MAX_PODSETS:
        found.append(f"{len(groups) + 1} PodSets (head and worker groups): a Workload holds at most {MAX_PODSETS}")
    if any(g.get("groupName") == "head" for g in groups):
        found.append("a worker group is named head, which Kueue keeps for the head group")
    return found


def _annotations(ps: PodSet) -> list[str]:
    notes = (ps.template.get("metadata") or {}).get("annotations") or {}
    at = f"PodSet {ps.name}"
    found = []
    if sum(key in notes for key in (REQUIRED, PREFERRED, UNCONSTRAINED)) > 1:
        found.append(f"{at}: more than one of {REQUIRED}, {PREFERRED}, {UNCONSTRAINED}")
    if (SLICE_LEVEL in notes) != (SLICE_SIZE in notes):
        found.append(f"{at}: {SLICE_LEVEL} and {SLICE_SIZE} go together")
    if SLICE_SIZE in notes:
        size = str(notes[SLICE_SIZE])
        if not size.isdigit() or not 1 <= int(size) <= ps.count:
            found.append(f"{at}: {SLICE_SIZE} {size!r} must be a number from 1 to the PodSet's {ps.count} pods")
    if GROUP in notes:
        if SLICE_LEVEL in notes or SLICE_SIZE in notes:
            found.append(f"{at}: {GROUP} may not be set with a slice")
        if REQUIRED not in notes and PREFERRED not in notes:
            found.append(f"{at}: {GROUP} needs {REQUIRED} or {PREFERRED}")
    return found


def _groups(w: Workload) -> list[str]:
    groups: dict[str, list[PodSet]] = defaultdict(list)
    for ps in w.podsets:
        if ps.topology.group is not None:
            groups[ps.topology.group].append(ps)
    found = []
    for name, members in groups.items():
        if len(members) != 2:
            found.append(f"PodSet group {name} has {len(members)} PodSets: a group is exactly 2")
            continue
        first, second = members
        if first.count != 1 and second.count != 1:
            found.append(f"PodSet group {name}: {first.count} and {second.count} pods; one PodSet must be a single pod")
        a, b = first.topology, second.topology
        if (a.required, a.preferred) != (b.required, b.preferred):
            found.append(f"PodSet group {name}: {first.name} and {second.name} ask for different topology levels")
    return found


def findings(w: Workload) -> list[Finding]:
    """Each reason Kueue's webhook refuses the object at creation: it is never created, so never runs."""
    reasons = (_ray(w) if w.kind in ("RayJob", "RayCluster") else []) + _groups(w)
    for ps in w.podsets:
        reasons += _annotations(ps)
    return [Finding(w.where, "refused", f"Kueue's webhook refuses it: {why}") for why in reasons]
