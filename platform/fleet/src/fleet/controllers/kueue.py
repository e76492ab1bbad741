"""Kueue v0.19.2's admission rules, as a simulation over one cluster's rendered Kueue objects and a job (pure).

What is simulated is an empty cluster: each PodSet of a job's Workload (fleet.controllers.podsets) gets the
first flavor of its ClusterQueue that matches it and whose quota could ever hold it, in PodSet order, as
`pkg/scheduler/flavorassigner/flavorassigner.go` `findFlavorForPodSets` does. A PodSet that gets none there
is never admitted, however long it waits. The steps, each as Kueue v0.19.2 has it:

- Management. A job is Kueue's only in a namespace `managedJobsNamespaceSelector` selects, queue name or not
  (`pkg/controller/jobframework/reconciler.go` `ReconcileGenericJob`, "Namespace not opted in";
  ManagedJobsNamespaceSelectorAlwaysRespected is GA and locked on in 0.19, `pkg/features/kube_features.go`;
  upstream e2e test/e2e/sequential/baseline/reconcile_test.go "should not reconcile a job in the default
  (unmanaged) namespace"). A job created suspended there stays suspended.
- Queue. Its LocalQueue must exist and point at a ClusterQueue whose `namespaceSelector` takes the namespace
  (`pkg/workload/resources.go` ErrNamespaceMismatch; `pkg/cache/queue/manager.go`).
- TAS match (`pkg/scheduler/flavorassigner/tas_flavorassigner.go` `checkPodSetAndFlavorMatchForTAS`,
  `isTASImplied`; `pkg/cache/scheduler/clusterqueue.go` `isTASOnly`): a PodSet that asks for no topology
  gets TAS implied only in a queue whose every flavor names a Topology; elsewhere it may use no
  topology-aware flavor (upstream test pkg/scheduler/scheduler_tas_test.go "workload which does not need TAS
  skips the TAS flavor"). A PodSet that asks for a level needs a flavor whose Topology has it
  (`pkg/cache/scheduler/tas_flavor_snapshot.go` `HasLevel`, `levelKey`; test "workload requests topology
  level which is only present in second flavor", which also shows flavors of one queue naming different
  Topologies: `clusterQueue.updateFlavorMetadata` keeps a Topology per flavor).
- Node labels (`flavorassigner.go` `checkFlavorForPodSets`, `flavorSelector`): the pod's nodeSelector and
  required node affinity, restricted to the keys of the flavor's own `nodeLabels`, must match them (tests
  flavorassigner_test.go "multiple flavors, fits a node selector", "multiple flavors with different label
  keys, selector only uses flavor's own keys"). Flavor taints are not simulated: no Meridian flavor has any.
- Quota (`flavorassigner.go` `fitsResourceQuota`, "ExceedsMaxQuota"; `pkg/cache/scheduler/resource_node.go`
  `potentialAvailable`): the PodSets' requests on a flavor must fit what the queue could ever get there,
  nominal quota plus what its cohort holds (its own quota and its queues' lendable quota), capped at nominal
  plus borrowingLimit. A requested resource no resource group covers is never admitted ("resource %s
  unavailable in ClusterQueue").
- First fit wins. v1beta2 `flavorFungibility.whenCanBorrow` defaults to MayStopSearch
  (apis/kueue/v1beta2/clusterqueue_types.go `FlavorFungibility`; test "borrow before try next flavor"): a
  PodSet takes the first flavor it fits, even by borrowing; a pod that selects no pool may land in any.

The findings besides "never admitted": a GPU PodSet more than one flavor (or another pool's) admits when its
job names a pool ("pool not enforced"); `podset-slice-size` not dividing the count (Kueue places count //
size slices: `tas_flavor_snapshot.go` `findLevelWithFitDomains` `sliceCount := state.count /
state.sliceSize`; `pkg/controller/tas/topology_ungater.go`: "the assignment can cover fewer pods than the
PodSet count"); a Kueue RayJob with `ttlSecondsAfterFinished` > 0 (Kueue releases the quota when the RayJob
is Complete or Failed, `pkg/controller/jobs/rayjob/rayjob_controller.go` `Finished`, while KubeRay keeps the
RayCluster for the TTL, ray-operator/controllers/ray/rayjob_controller.go `handleShutdownAfterJobFinishes`
at v1.7.0: kubernetes-sigs/kueue#3994); what Kueue's webhooks refuse (fleet.controllers.refusals); and the
manager configuration (fleet.controllers.gates).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import yaml

from contract import names
from contract.quantity import parse
from fleet.controllers import gates, refusals
from fleet.controllers.findings import Finding
from fleet.controllers.pods import Requests, pod_requests
from fleet.controllers.podsets import Obj, PodSet, Workload, workload

GPU = names.GPU_RESOURCE


@dataclass(frozen=True)
class Cluster:
    """One cluster's Kueue objects, the namespaces and LimitRanges jobs meet, and Kueue's manager config."""

    topologies: Mapping[str, tuple[str, ...]]  # Topology -> its levels, widest first
    flavors: Mapping[str, Obj]  # ResourceFlavor name -> object
    queues: Mapping[str, Obj]  # ClusterQueue name -> object, in the order rendered
    cohorts: Mapping[str, Obj]  # Cohort name -> object
    local_queues: Mapping[tuple[str, str], str]  # (namespace, LocalQueue) -> ClusterQueue
    namespaces: Mapping[str, Mapping[str, str]]  # namespace -> labels (with kubernetes.io/metadata.name)
    defaults: Mapping[str, Mapping[str, object]]  # namespace -> LimitRange defaultRequest for containers
    configuration: Obj  # the manager Configuration (config.kueue.x-k8s.io/v1beta2); {} when not rendered
    chart_values: Obj  # the Kueue chart's values (charts/kueue/values.yaml); {} when not rendered


def cluster(objects: Iterable[Obj], chart_values: Obj | None = None) -> Cluster:
    """The cluster as the rendered objects and the Kueue chart's values (the `kueue` Application's) make it."""
    topologies: dict[str, tuple[str, ...]] = {}
    by_kind: dict[str, dict[str, Obj]] = {"ResourceFlavor": {}, "ClusterQueue": {}, "Cohort": {}}
    local_queues: dict[tuple[str, str], str] = {}
    namespaces: dict[str, dict[str, str]] = {}
    defaults: dict[str, dict[str, object]] = {}
    for o in objects:
        kind, meta = o.get("kind"), o.get("metadata") or {}
        name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
        if kind == "Topology":
            topologies[name] = tuple(str(level["nodeLabel"]) for level in o["spec"]["levels"])
        elif kind in by_kind:
            by_kind[str(kind)][name] = o
        elif kind == "LocalQueue":
            local_queues[(namespace, name)] = str(o["spec"]["clusterQueue"])
        elif kind == "Namespace":
            namespaces[name] = {**(meta.get("labels") or {}), "kubernetes.io/metadata.name": name}
        elif kind == "LimitRange":
            for limit in o["spec"].get("limits") or []:
                if limit.get("type") == "Container":
                    defaults.setdefault(namespace, {}).update(limit.get("defaultRequest") or {})
    values = chart_values or {}
    embedded = ((values.get("managerConfig") or {}).get("controllerManagerConfigYaml")) or ""
    configuration = yaml.safe_load(embedded) if embedded else {}
    return Cluster(
        topologies,
        by_kind["ResourceFlavor"],
        by_kind["ClusterQueue"],
        by_kind["Cohort"],
        local_queues,
        namespaces,
        defaults,
        configuration or {},
        values,
    )


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A Kubernetes LabelSelector (matchLabels, matchExpressions) against labels; None selects everything."""
    if selector is None:
        return True
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_requirement(e, labels) for e in selector.get("matchExpressions") or [])


def _requirement(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
    present, value = key in labels, labels.get(str(key))
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and values:
        try:
            left, right = int(str(value)), int(str(values[0]))
        except ValueError:
            return False
        return left > right if operator == "Gt" else left < right
    return False


def flavor_selects(spec: Mapping[str, Any], node_labels: Mapping[str, str]) -> bool:
    """`flavorSelector`: the pod's nodeSelector and required node affinity, on the flavor's own label keys."""
    keys = set(node_labels)
    if any(node_labels[k] != v for k, v in (spec.get("nodeSelector") or {}).items() if k in keys):
        return False
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    kept = []
    for term in affinity.get("nodeSelectorTerms") or []:
        expressions = [e for e in term.get("matchExpressions") or [] if e.get("key") in keys]
        if not expressions:
            return True  # terms are ORed, and this one no longer constrains the flavor's labels
        kept.append(expressions)
    return not kept or any(all(_requirement(e, node_labels) for e in term) for term in kept)


def _groups(queue: Obj) -> list[Obj]:
    return list(queue["spec"].get("resourceGroups") or [])


def _flavor_names(queue: Obj) -> list[str]:
    return [str(f["name"]) for group in _groups(queue) for f in group.get("flavors") or []]


def tas_only(c: Cluster, queue: Obj) -> bool:
    """`clusterQueue.isTASOnly`: every flavor of every resource group exists and names a Topology."""
    return all((c.flavors.get(f) or {}).get("spec", {}).get("topologyName") for f in _flavor_names(queue))


def _quota(queue: Obj, flavor: str, resource: str) -> Mapping[str, Any] | None:
    for group in _groups(queue):
        for entry in group.get("flavors") or []:
            if entry["name"] == flavor:
                return next((r for r in entry.get("resources") or [] if r["name"] == resource), None)
    return None


def _lendable(queue: Obj, flavor: str, resource: str) -> Fraction:
    """What a queue's nominal quota adds to its cohort: all of it, or its lendingLimit (`localQuota`)."""
    quota = _quota(queue, flavor, resource) or {}
    nominal = parse(quota.get("nominalQuota", 0))
    lending = quota.get("lendingLimit")
    return nominal if lending is None else min(nominal, parse(lending))


def _cohort_quota(c: Cluster, cohort: str, flavor: str, resource: str) -> Fraction:
    """The cohort's SubtreeQuota: its own nominal quota plus what each of its queues lends (no parent cohorts)."""
    own = Fraction(0)
    for group in ((c.cohorts.get(cohort) or {}).get("spec") or {}).get("resourceGroups") or []:
        for entry in group.get("flavors") or []:
            if entry["name"] == flavor:
                own += sum((parse(r["nominalQuota"]) for r in entry["resources"] if r["name"] == resource), Fraction())
    members = (q for q in c.queues.values() if q["spec"].get("cohortName") == cohort)
    return own + sum((_lendable(q, flavor, resource) for q in members), Fraction())


def potential(c: Cluster, queue: Obj, flavor: str, resource: str) -> Fraction:
    """`potentialAvailable`: the most of `resource` in `flavor` the queue could ever be admitted."""
    quota = _quota(queue, flavor, resource) or {}
    nominal = parse(quota.get("nominalQuota", 0))
    cohort = queue["spec"].get("cohortName")
    if not cohort:
        return nominal
    local = nominal - _lendable(queue, flavor, resource)
    available = local + _cohort_quota(c, str(cohort), flavor, resource)
    if quota.get("borrowingLimit") is not None:
        available = min(available, nominal + parse(quota["borrowingLimit"]))
    return available


def tas_mismatch(c: Cluster, queue: Obj, podset: PodSet, flavor: Obj, covered: set[str], wants: Requests) -> str | None:
    """`checkPodSetAndFlavorMatchForTAS`: why the flavor cannot take the PodSet for topology, or None."""
    request, name = podset.topology, flavor["metadata"]["name"]
    topology_name = (flavor.get("spec") or {}).get("topologyName")
    if not request.explicit and tas_only(c, queue):
        return None  # TAS implied: every flavor of the queue is topology-aware
    if not request.explicit:
        if topology_name:
            return (
                f"{name} takes only topology-aware PodSets and the queue is not TAS-only (a flavor names no Topology)"
            )
        return None
    if not topology_name:
        return None if not covered & set(wants) else f"{name} is not topology-aware"
    levels = c.topologies.get(str(topology_name))
    if levels is None:
        return f"{name} names Topology {topology_name}, which does not exist"
    # `HasLevel`: the request's level (`levelKey`: required, preferred, the widest for a slice-only request, the
    # node for unconstrained: true, none for unconstrained: false) and its slice level (default the node).
    if request.level:
        level: str | None = request.level
    elif request.slice_level:
        level = levels[0]
    else:
        level = levels[-1] if request.unconstrained else None
    for wanted in (level, request.slice_level or levels[-1]):
        if wanted not in levels:
            return f"{name}'s Topology {topology_name} has no level {wanted or '(unconstrained: false names none)'}"
    return None


def misfit(c: Cluster, queue: Obj, podset: PodSet, flavor_name: str, group: Obj, wants: Requests) -> str | None:
    """Why the flavor cannot take the PodSet whatever the quota (`checkFlavorForPodSets`), or None."""
    flavor = c.flavors.get(flavor_name)
    if flavor is None:
        return f"ResourceFlavor {flavor_name} does not exist"
    covered = {str(r) for r in group.get("coveredResources") or []}
    why = tas_mismatch(c, queue, podset, flavor, covered, wants)
    if why is not None:
        return why
    node_labels = (flavor.get("spec") or {}).get("nodeLabels") or {}
    if not flavor_selects(podset.spec, node_labels):
        shown = ", ".join(f"{k}={v}" for k, v in sorted(node_labels.items()))
        return f"the pods' node selector excludes {flavor_name} ({shown})"
    return None


def _short(amount: Fraction, resource: str) -> str:
    if resource == "memory":
        return f"{float(amount / 2**30):,.0f}Gi"
    return f"{float(amount):,.4g}"


@dataclass(frozen=True)
class Placement:
    """Where one PodSet goes on an empty cluster: its flavor per resource group, or why it goes nowhere."""

    podset: PodSet
    requests: Requests  # per pod
    flavors: tuple[str, ...]  # the flavor taken in each resource group the PodSet requests from
    reasons: tuple[str, ...]  # why no flavor: empty when placed

    @property
    def placed(self) -> bool:
        return not self.reasons


def _fits(
    c: Cluster, queue: Obj, flavor: str, wants: Requests, covered: set[str], used: dict[tuple[str, str], Fraction]
) -> str | None:
    for resource in sorted(covered & set(wants), key=lambda r: (r != GPU, r)):  # GPUs first: the clearest
        most = potential(c, queue, flavor, resource)
        if used.get((flavor, resource), Fraction(0)) + wants[resource] > most:
            asked, ceiling = _short(wants[resource], resource), _short(most, resource)
            return f"{flavor}: {asked} {resource} is more than the queue can get ({ceiling})"
    return None


def _place(
    c: Cluster, queue: Obj, podset: PodSet, per_pod: Requests, used: dict[tuple[str, str], Fraction]
) -> Placement:
    wants = {r: amount * podset.count for r, amount in per_pod.items()}
    taken: list[str] = []
    reasons: list[str] = []
    for resource in sorted(set(wants) - {r for g in _groups(queue) for r in g.get("coveredResources") or []}):
        reasons.append(f"resource {resource} unavailable in ClusterQueue {queue['metadata']['name']}")
    for group in _groups(queue):
        covered = {str(r) for r in group.get("coveredResources") or []}
        if not covered & set(wants):
            continue
        why_not = []
        for entry in group.get("flavors") or []:
            flavor = str(entry["name"])
            why = misfit(c, queue, podset, flavor, group, wants) or _fits(c, queue, flavor, wants, covered, used)
            if why is None:
                taken.append(flavor)
                for resource in covered & set(wants):
                    used[(flavor, resource)] = used.get((flavor, resource), Fraction(0)) + wants[resource]
                break
            why_not.append(why)
        else:
            reasons.extend(why_not or ["the resource group has no flavors"])
    return Placement(podset, per_pod, tuple(taken), tuple(reasons))


def place(c: Cluster, queue: Obj, w: Workload) -> list[Placement]:
    """Every PodSet of the workload, in order, on an empty cluster (quota taken by earlier PodSets counts)."""
    used: dict[tuple[str, str], Fraction] = {}
    defaults = c.defaults.get(w.namespace, {})
    return [_place(c, queue, ps, pod_requests(ps.spec, defaults), used) for ps in w.podsets]


def admitting(c: Cluster, queue: Obj, podset: PodSet, per_pod: Requests) -> list[str]:
    """Every flavor that could take the PodSet alone on an empty cluster, in the queue's order."""
    wants = {r: amount * podset.count for r, amount in per_pod.items()}
    found = []
    for group in _groups(queue):
        covered = {str(r) for r in group.get("coveredResources") or []}
        for entry in group.get("flavors") or []:
            flavor = str(entry["name"])
            if misfit(c, queue, podset, flavor, group, wants) is None and not _fits(
                c, queue, flavor, wants, covered, {}
            ):
                found.append(flavor)
    return found


def _queue_of(c: Cluster, w: Workload) -> tuple[Obj | None, Finding | None]:
    """The workload's ClusterQueue, or the finding that says why it has none."""
    where = w.where
    if w.queue is None:
        return None, Finding(
            where,
            "no-queue",
            f"no {names.QUEUE_LABEL} label: Kueue suspends it in a managed "
            "namespace and never admits it; add the label with the team's LocalQueue",
        )
    target = c.local_queues.get((w.namespace, w.queue))
    if target is None:
        return None, Finding(
            where, "no-queue", f"LocalQueue {w.namespace}/{w.queue} does not exist; use the team's LocalQueue"
        )
    queue = c.queues.get(target)
    if queue is None:
        return None, Finding(where, "no-queue", f"ClusterQueue {target} (of LocalQueue {w.queue}) does not exist")
    if not selects(queue["spec"].get("namespaceSelector"), c.namespaces.get(w.namespace, {})):
        return None, Finding(
            where,
            "no-queue",
            f"ClusterQueue {target} does not take workloads from namespace {w.namespace} (its namespaceSelector)",
        )
    return queue, None


def opted_in(c: Cluster, namespace: str) -> bool:
    """Whether Kueue manages jobs in the namespace: `managedJobsNamespaceSelector` selects it (module docstring)."""
    labels = c.namespaces.get(namespace)
    return labels is not None and selects(c.configuration.get("managedJobsNamespaceSelector"), labels)


def _unmanaged(c: Cluster, w: Workload) -> list[Finding]:
    """A job outside Kueue's namespaces: a finding when it waits for Kueue (a queue name, or created suspended)."""
    if w.queue is None and not (w.source.get("spec") or {}).get("suspend"):
        return []  # not Kueue's, and not waiting for it
    what = (
        "is not in the rendered tree"
        if w.namespace not in c.namespaces
        else "is not one managedJobsNamespaceSelector selects"
    )
    return [
        Finding(
            w.where,
            "never-managed",
            f"namespace {w.namespace} {what}: Kueue ignores the job, queue "
            "name or not, so it is never admitted and one created suspended stays suspended; run it in a "
            "namespace Kueue manages",
        )
    ]


def _podset_findings(c: Cluster, queue: Obj, w: Workload, pool: str | None) -> list[Finding]:
    found = []
    queue_name = queue["metadata"]["name"]
    for p in place(c, queue, w):
        at = f"{w.where} PodSet {p.podset.name} ({p.podset.count} pods)"
        if not p.placed:
            found.append(
                Finding(
                    at,
                    "never-admitted",
                    f"no flavor of ClusterQueue {queue_name} ever admits it: " + "; ".join(p.reasons),
                )
            )
            continue
        if pool is None or p.requests.get(GPU, Fraction(0)) <= 0:
            continue
        takers = admitting(c, queue, p.podset, p.requests)
        if takers != [pool]:
            found.append(
                Finding(
                    at,
                    "pool-not-enforced",
                    f"the job asks for pool {pool} but flavors "
                    f"{', '.join(takers)} admit it and Kueue takes the first that fits "
                    "(whenCanBorrow: MayStopSearch); select the pool "
                    f"({names.NODE_POOL_LABEL}: {pool}) in the pod template",
                )
            )
    return found


def _topology_findings(w: Workload) -> list[Finding]:
    found = []
    for ps in w.podsets:
        size = ps.topology.slice_size
        if size and ps.count % size:
            found.append(
                Finding(
                    f"{w.where} PodSet {ps.name}",
                    "slice-size",
                    f"podset-slice-size {size} does "
                    f"not divide its {ps.count} pods: Kueue places {ps.count // size} whole slices and "
                    f"leaves {ps.count % size} pods without a topology domain; make the count a multiple",
                )
            )
    return found


def _ttl_findings(w: Workload) -> list[Finding]:
    ttl = (w.source.get("spec") or {}).get("ttlSecondsAfterFinished")
    if w.kind != "RayJob" or not isinstance(ttl, int) or ttl <= 0:
        return []
    return [
        Finding(
            w.where,
            "ttl-after-finished",
            f"ttlSecondsAfterFinished {ttl}: Kueue releases the quota when "
            f"the RayJob finishes while KubeRay keeps its RayCluster's pods {ttl} s more, on nodes "
            "others are admitted to (kubernetes-sigs/kueue#3994); set it to 0",
        )
    ]


def job_findings(c: Cluster, o: Obj, pool: str | None = None) -> list[Finding]:
    """What Kueue does wrong or never does with the object; `pool`: the GPU pool its job asked for, if any."""
    w = workload(o)
    if w is None:
        return []
    if not opted_in(c, w.namespace):
        return _unmanaged(c, w)
    queue, missing = _queue_of(c, w)
    found = [*refusals.findings(w), *([missing] if missing else [])]
    if queue is not None:
        found += _podset_findings(c, queue, w, pool)
    return found + _topology_findings(w) + _ttl_findings(w)


def config_findings(c: Cluster) -> list[Finding]:
    """What is wrong in the cluster's Kueue configuration itself: feature gates, Topologies, TAS-only queues."""
    found = gates.findings(c.configuration, c.chart_values)
    for name, queue in c.queues.items():
        for flavor in _flavor_names(queue):
            spec = (c.flavors.get(flavor) or {}).get("spec")
            if spec is None:
                found.append(
                    Finding(
                        f"ClusterQueue {name}",
                        "missing-flavor",
                        f"ResourceFlavor {flavor} does not "
                        "exist: the queue is inactive (clusterqueue.go inactiveReason FlavorNotFound)",
                    )
                )
            elif spec.get("topologyName") and spec["topologyName"] not in c.topologies:
                found.append(
                    Finding(
                        f"ResourceFlavor {flavor}",
                        "missing-topology",
                        f"Topology "
                        f"{spec['topologyName']} does not exist: ClusterQueue {name} is inactive "
                        "(clusterqueue.go inactiveReason TopologyNotFound)",
                    )
                )
        if not tas_only(c, queue) and any(
            (c.flavors.get(f) or {}).get("spec", {}).get("topologyName") for f in _flavor_names(queue)
        ):
            found.append(
                Finding(
                    f"ClusterQueue {name}",
                    "tas-mixed-queue",
                    "mixes topology-aware and other "
                    "flavors: a PodSet without a topology request can use only the others "
                    "(tas_flavorassigner.go isTASImplied); give every flavor a Topology",
                )
            )
    return found
