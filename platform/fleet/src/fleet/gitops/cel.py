"""CEL building blocks of the admission policies (fleet.gitops.admission): literals, the pod
templates every workload kind holds, their containers, and the GPU and Pod Security conditions.

Each returns CEL source text; the policies combine them, so one condition is spelled once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from contract.names import ACCELERATOR_LABEL, RAY_NODE_TYPE_LABEL
from fleet import names

SELINUX_TYPES = ("", "container_t", "container_init_t", "container_kvm_t", "container_engine_t")

# Node labels that name a GPU pool (GKE's node pool, the fleet's pool); GKE's accelerator label is on GPU nodes only.
POOL_KEYS = (names.NODE_POOL_LABEL, names.POOL_LABEL)
# Node labels whose value is one node: the kubelet's hostname (the node's name), and GKE's physical host, which
# on an A3 Ultra machine (8 GPUs, the whole host) is one node too. Kueue's wider levels (block, sub-block) and
# the pools select groups of nodes and stay open to teams.
NODE_NAME_LABELS = (names.HOSTNAME_LABEL, names.HOST_LABEL)
SCHEDULING_TERMS = (
    "requiredDuringSchedulingIgnoredDuringExecution",
    "preferredDuringSchedulingIgnoredDuringExecution",
)


def literal(value: Any) -> str:
    """A CEL literal for strings, lists and maps of them (JSON's syntax is CEL's for these)."""
    return json.dumps(value, sort_keys=True)


def resource_rules(
    resources: Iterable[tuple[str, str, tuple[str, ...]]], operations: Iterable[str]
) -> list[dict[str, Any]]:
    ops = tuple(operations)
    return [  # fresh lists per rule: shared ones would come out as YAML anchors
        {"apiGroups": [group], "apiVersions": [version], "operations": list(ops), "resources": list(res)}
        for group, version, res in resources
    ]


def _ray_cluster(spec: str, of: Callable[[str], str]) -> str:
    """A Ray cluster spec's head and worker templates. The CRD types head and worker templates
    separately (each schema its own type), so a list holding both takes them as dyn."""
    workers = f"{spec}.workerGroupSpecs"
    return (
        f"[dyn({of(f'{spec}.headGroupSpec.template')})] + "
        f"(has({workers}) ? {workers}.map(g, dyn({of('g.template')})) : [])"
    )


@dataclass(frozen=True)
class Kinds:
    """Workload kinds whose pod templates sit at the same paths, so one expression type-checks on each.

    The API server type-checks a policy's expressions against every kind its rules match; a shared
    expression that dispatched on request.resource named fields some matched kinds lack
    (`object.spec.template` on a Pod) and mixed list types across its branches. So the policies that
    read pod templates come one per Kinds (admission.per_kinds). Every workload becomes pods, so the
    Pod rule alone would do; checking templates refuses a bad job when it is submitted instead of
    when its pods fail.
    """

    name: str  # the policy name's suffix
    resources: tuple[tuple[str, str, tuple[str, ...]], ...]
    templates_of: Callable[[Callable[[str], str]], str]  # of(t) for every pod template t, as one CEL list
    head_first: str  # CEL: the first pod template is a Ray head

    @property
    def templates(self) -> str:
        return self.templates_of(lambda t: f"{t}.spec")

    @property
    def template_labels(self) -> str:
        """The labels of each pod template (an empty map where it has none)."""
        return self.templates_of(
            lambda t: f"(has({t}.metadata) && has({t}.metadata.labels) ? {t}.metadata.labels : {{}})"
        )


_RAY_HEAD = literal(RAY_NODE_TYPE_LABEL)
PODS = Kinds(
    "pods",
    (("", "v1", ("pods",)),),
    lambda of: f"[{of('object')}]",
    # The head pod KubeRay builds.
    f"has(object.metadata.labels) && {_RAY_HEAD} in object.metadata.labels && "
    f"object.metadata.labels[{_RAY_HEAD}] == 'head'",
)
TEMPLATED = Kinds(
    "jobs-deployments",
    (("batch", "v1", ("jobs",)), ("apps", "v1", ("deployments",))),
    lambda of: f"[{of('object.spec.template')}]",
    "false",
)
RAYCLUSTERS = Kinds(
    "rayclusters", (("ray.io", "v1", ("rayclusters",)),), lambda of: _ray_cluster("object.spec", of), "true"
)
RAYJOBS = Kinds(
    "rayjobs",
    (("ray.io", "v1", ("rayjobs",)),),
    lambda of: (
        f"(has(object.spec.rayClusterSpec) ? {_ray_cluster('object.spec.rayClusterSpec', of)} : []) + "
        f"(has(object.spec.submitterPodTemplate) ? [dyn({of('object.spec.submitterPodTemplate')})] : [])"
    ),
    "has(object.spec.rayClusterSpec)",
)
# Everything that becomes a pod in a team namespace, and the pods themselves, by pod template layout.
WORKLOAD_KINDS = (PODS, TEMPLATED, RAYCLUSTERS, RAYJOBS)
WORKLOADS = tuple(r for kinds in WORKLOAD_KINDS for r in kinds.resources)

# Per pod spec, its containers of every kind (lists of lists: Kubernetes CEL has no flatten on 1.35's
# default library set that the test evaluator also has). Ephemeral containers are another type than
# containers: as dyn, so the concatenation type-checks.
CONTAINERS = """\
variables.templates.map(p,
  (has(p.containers) ? p.containers : []) +
  (has(p.initContainers) ? p.initContainers : []) +
  (has(p.ephemeralContainers) ? p.ephemeralContainers.map(c, dyn(c)) : []))"""


def each_container(condition: str) -> str:
    return f"variables.containers.all(cs, cs.all(c, {condition}))"


def where_set(field: str, condition: str) -> str:
    """`condition` on securityContext.<field> where it is set."""
    return f"!has(c.securityContext) || !has(c.securityContext.{field}) || {condition}"


def baseline_rest(sc: str) -> str:
    """Baseline's remaining controls on one securityContext `sc` (pod's or container's)."""
    return (
        f"(!has({sc}.seccompProfile) || {sc}.seccompProfile.type != 'Unconfined') && "
        f"(!has({sc}.appArmorProfile) || {sc}.appArmorProfile.type != 'Unconfined') && "
        f"(!has({sc}.windowsOptions) || !has({sc}.windowsOptions.hostProcess) || !{sc}.windowsOptions.hostProcess) && "
        f"(!has({sc}.seLinuxOptions) || (!has({sc}.seLinuxOptions.user) && !has({sc}.seLinuxOptions.role) && "
        f"(!has({sc}.seLinuxOptions.type) || {sc}.seLinuxOptions.type in {literal(list(SELINUX_TYPES))})))"
    )


def validation(expression: str, message: str) -> dict[str, str]:
    return {"expression": expression, "message": message, "reason": "Forbidden"}


def requests_gpu(p: str) -> str:
    """Some container of pod spec `p` asks for a GPU (a non-zero nvidia.com/gpu request or limit).

    Ephemeral containers have no resources. Quantities reach CEL as strings ('8'); string() also
    takes a YAML integer.
    """
    gpu = literal(names.GPU_RESOURCE)
    some = " || ".join(
        f"(has(c.resources.{part}) && {gpu} in c.resources.{part} && string(c.resources.{part}[{gpu}]) != '0')"
        for part in ("requests", "limits")
    )
    return (
        f"[has({p}.containers) ? {p}.containers : [], has({p}.initContainers) ? {p}.initContainers : []]"
        f".exists(cs, cs.exists(c, has(c.resources) && ({some})))"
    )


def tolerates_gpu(p: str) -> str:
    """Pod spec `p` tolerates GKE's GPU taint, by its key or by an empty key (which tolerates every taint)."""
    return f"(has({p}.tolerations) && {p}.tolerations.exists(t, !has(t.key) || t.key in ['', {literal(names.GPU_TAINT_KEY)}]))"


def selects_gpu(p: str, pools: list[str]) -> str:
    """Pod spec `p` asks for a GPU node: the accelerator label, or a GPU pool's name by node selector or affinity.

    Only the taint keeps pods off GPU nodes; this catches the intent (and the Kueue flavor it picks) early.
    """
    accelerator, pool_keys, gpu_pools = literal(ACCELERATOR_LABEL), literal(list(POOL_KEYS)), literal(pools)
    term = (
        f"(e.key == {accelerator} && e.operator in ['In', 'Exists']) || "
        f"(e.key in {pool_keys} && e.operator == 'In' && has(e.values) && e.values.exists(v, v in {gpu_pools}))"
    )
    na = f"{p}.affinity.nodeAffinity"
    required = f"{na}.requiredDuringSchedulingIgnoredDuringExecution"
    preferred = f"{na}.preferredDuringSchedulingIgnoredDuringExecution"
    return (
        f"(has({p}.nodeSelector) && ({accelerator} in {p}.nodeSelector || "
        f"{p}.nodeSelector.exists(k, k in {pool_keys} && {p}.nodeSelector[k] in {gpu_pools}))) || "
        f"(has({p}.affinity) && has({na}) && ("
        f"(has({required}) && {required}.nodeSelectorTerms.exists(s, has(s.matchExpressions) && "
        f"s.matchExpressions.exists(e, {term}))) || "
        f"(has({preferred}) && {preferred}.exists(w, has(w.preference.matchExpressions) && "
        f"w.preference.matchExpressions.exists(e, {term})))))"
    )


def names_node(p: str) -> str:
    """Pod spec `p` chooses its node by name: a nodeSelector or node affinity term (required or preferred) on a
    NODE_NAME_LABELS label, or any node affinity `matchFields`.

    `matchFields` selects by the Node object's fields, and the API server accepts one key there,
    `metadata.name` (k8s.io/kubernetes pkg/apis/core/validation/validation.go
    `ValidateNodeFieldSelectorRequirement`, `nodeFieldSelectorValidators`; the DaemonSet controller pins its
    pods that way: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/#how-daemon-pods-are-scheduled),
    so every matchFields names nodes, NotIn included.
    """
    labels = literal(list(NODE_NAME_LABELS))
    na = f"{p}.affinity.nodeAffinity"
    required, preferred = (f"{na}.{t}" for t in SCHEDULING_TERMS)

    def term(t: str) -> str:
        return (
            f"(has({t}.matchFields) && size({t}.matchFields) > 0) || "
            f"(has({t}.matchExpressions) && {t}.matchExpressions.exists(e, e.key in {labels}))"
        )

    return (
        f"(has({p}.nodeSelector) && {p}.nodeSelector.exists(k, k in {labels})) || "
        f"(has({p}.affinity) && has({na}) && ("
        f"(has({required}) && {required}.nodeSelectorTerms.exists(s, {term('s')})) || "
        f"(has({preferred}) && {preferred}.exists(w, {term('w.preference')}))))"
    )


def pod_affinity_in_namespace(p: str) -> str:
    """Every pod affinity and anti-affinity term of pod spec `p` (required or preferred) looks only at pods of
    the request's namespace: no namespaceSelector (`{}` is every namespace), `namespaces` only its own.

    A term reaching other namespaces puts a pod on (or keeps others off) the nodes another team's pods run on,
    found by their labels (https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#namespace-selector).
    """
    own = "(!has(t.namespaceSelector) && (!has(t.namespaces) || t.namespaces.all(n, n == request.namespace)))"
    checks = []
    for kind in ("podAffinity", "podAntiAffinity"):
        a = f"{p}.affinity.{kind}"
        required, preferred = (f"{a}.{t}" for t in SCHEDULING_TERMS)
        checks.append(
            f"(!has({a}) || ((!has({required}) || {required}.all(t, {own})) && "
            f"(!has({preferred}) || {preferred}.map(w, w.podAffinityTerm).all(t, {own}))))"
        )
    return f"(!has({p}.affinity) || ({' && '.join(checks)}))"


def unchanged(*fields: str) -> str:
    """An UPDATE leaves each of the object's `spec.<field>` as it was (both absent counts as the same)."""
    return "request.operation == 'UPDATE' && " + " && ".join(
        f"(has(object.spec.{f}) ? has(oldObject.spec.{f}) && object.spec.{f} == oldObject.spec.{f} : "
        f"!has(oldObject.spec.{f}))"
        for f in fields
    )
