"""Placement by node name, tested as an attacker (issue 39, item 5), with the real CEL evaluator (vap.py).

`spec.nodeName` was refused while every other way of naming a node was admitted: nodeAffinity `matchFields`
(whose one key is `metadata.name`), a `kubernetes.io/hostname` nodeSelector or affinity term, and, on a pod
Kueue holds behind a scheduling gate, an UPDATE adding one (Kubernetes lets a gated pod's nodeSelector and
node affinity grow: "Pod Scheduling Readiness", mutable scheduling directives). Each must be refused for a
team's own requests, in every cluster, while Kueue's topology ungater, which writes exactly such a hostname
nodeSelector into gated pods (kueue v0.19.2 pkg/controller/tas/topology_ungater.go `Reconcile`), keeps working.

The policies come from the renderer (fleet.gitops.admission), as the `teams` application holds them; the
committed tree follows from it (tests/gitops/test_generated.py), and test_admission.py checks that tree with
gkr's golden jobs and the platform's own pods.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator

import pytest

from fleet import names
from fleet.gitops import admission, argocd
from fleet.gitops.check import ClusterTree
from fleet.gitops.validate import Finding
from fleet.load import load
from fleet.model import Fleet
from tests.conftest import SHIPPED
from tests.tenancy.conftest import Policies
from tests.tenancy.rbac import Access, User, allowed
from tests.tenancy.test_admission import (
    TRAINER,
    Attempt,
    _golden,
    _outcomes,
    _pod,
    _refused,
    gpu_job,
    lighthouse,
    request,
)
from tests.tenancy.vap import RESEARCHER, Obj

VICTIM = "gke-meridian-us-central1-h200-a-victim"  # another team's node
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"  # kueue.TopologySchedulingGate (apis/kueue/v1beta2/topology_types.go)
HOST_LABEL = "cloud.google.com/gce-topology-host"  # one physical host: one A3 Ultra node

PodEdit = Callable[[Obj], None]
Target = Callable[[], tuple[Obj, Obj, str]]  # an object, the pod spec an attack edits, the user who sends it


def _required(term: Obj) -> PodEdit:
    def edit(spec: Obj) -> None:
        spec.setdefault("affinity", {})["nodeAffinity"] = {REQUIRED: {"nodeSelectorTerms": [term]}}

    return edit


def _preferred(term: Obj) -> PodEdit:
    def edit(spec: Obj) -> None:
        spec.setdefault("affinity", {})["nodeAffinity"] = {PREFERRED: [{"weight": 100, "preference": term}]}

    return edit


def _selector(key: str) -> PodEdit:
    return lambda spec: spec.setdefault("nodeSelector", {}).update({key: VICTIM})


def _pod_affinity(kind: str, **scope: object) -> PodEdit:
    """A pod (anti-)affinity term reaching pods of other namespaces: onto (or off) the nodes they run on."""

    def edit(spec: Obj) -> None:
        term = {"labelSelector": {}, "topologyKey": names.HOSTNAME_LABEL, **scope}
        spec.setdefault("affinity", {})[kind] = {REQUIRED: [term]}

    return edit


NAME = {"key": "metadata.name", "operator": "In", "values": [VICTIM]}
HOSTNAME = {"key": names.HOSTNAME_LABEL, "operator": "In", "values": [VICTIM]}
EDITS: dict[str, PodEdit] = {
    "matchFields metadata.name": _required({"matchFields": [NAME]}),
    "matchFields metadata.name, preferred": _preferred({"matchFields": [NAME]}),
    "matchFields NotIn metadata.name": _required({"matchFields": [{**NAME, "operator": "NotIn"}]}),
    "hostname nodeSelector": _selector(names.HOSTNAME_LABEL),
    "gce-topology-host nodeSelector": _selector(HOST_LABEL),
    "hostname in a required term": _required({"matchExpressions": [HOSTNAME]}),
    "hostname in a preferred term": _preferred({"matchExpressions": [HOSTNAME]}),
    "gce-topology-host in a required term": _required({"matchExpressions": [{**HOSTNAME, "key": HOST_LABEL}]}),
    "podAffinity to every namespace": _pod_affinity("podAffinity", namespaceSelector={}),
    "podAntiAffinity to its own and another team's namespace": _pod_affinity(
        "podAntiAffinity", namespaces=[names.team_namespace(t) for t in ("pretraining", "research")]
    ),
}


def _job() -> tuple[Obj, Obj, str]:
    job = gpu_job()
    return job, job["spec"]["template"]["spec"], RESEARCHER


def _job_pod() -> tuple[Obj, Obj, str]:
    job = gpu_job()
    pod = _pod(job, job["spec"]["template"], "0")
    return pod, pod["spec"], admission.JOB_CONTROLLER


def _rayjob_worker() -> tuple[Obj, Obj, str]:
    rayjob = copy.deepcopy(_golden("RayJob", "llama-70b-pretrain"))
    return rayjob, rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"], RESEARCHER


def _rayjob_submitter() -> tuple[Obj, Obj, str]:
    rayjob = copy.deepcopy(_golden("RayJob", "llama-70b-pretrain"))
    rayjob["spec"]["submitterPodTemplate"] = {
        "spec": {"restartPolicy": "Never", "containers": [{"name": "submit", "image": "rayproject/ray:2.41.0"}]}
    }
    return rayjob, rayjob["spec"]["submitterPodTemplate"]["spec"], RESEARCHER


def _raycluster_head() -> tuple[Obj, Obj, str]:
    cluster = copy.deepcopy(_golden("RayCluster", "research-dev"))
    return cluster, cluster["spec"]["headGroupSpec"]["template"]["spec"], RESEARCHER


def _deployment() -> tuple[Obj, Obj, str]:
    deployment = lighthouse("Deployment")
    return deployment, deployment["spec"]["template"]["spec"], RESEARCHER


TARGETS: dict[str, Target] = {
    "Job": _job,
    "Job's pod": _job_pod,
    "RayJob worker": _rayjob_worker,
    "RayJob submitter": _rayjob_submitter,
    "RayCluster head": _raycluster_head,
    "Deployment": _deployment,
}


def _created(target: Target, edit: PodEdit) -> Attempt:
    o, spec, user = target()
    edit(spec)
    return Attempt(request(o, user=user), o)


def gated_pod() -> Obj:
    """The TAS worker pod KubeRay creates for gkr's golden RayJob, as Kueue's pod webhook leaves it: gated
    until Kueue assigns it a domain (kueue v0.19.2 pkg/controller/jobs/pod/pod_webhook.go `Default`)."""
    rayjob = _golden("RayJob", "llama-70b-pretrain")
    template = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]
    assert "kueue.x-k8s.io/podset-preferred-topology" in template["metadata"]["annotations"]  # TAS
    pod = _pod(rayjob, template, "worker-0")
    pod["spec"]["schedulingGates"] = [{"name": TOPOLOGY_GATE}]
    return pod


def ungated(pod: Obj, edit: PodEdit | None = None) -> Obj:
    """What the ungater's patch makes of a gated pod: the gate removed, the node's hostname written (or `edit`)."""
    edit = edit or _selector(names.HOSTNAME_LABEL)
    new = copy.deepcopy(pod)
    new["spec"]["schedulingGates"] = []
    edit(new["spec"])
    return new


def _moved() -> Attempt:
    """Kueue ungated the pod onto one node while another gate still holds it; a team member re-points it."""
    old = ungated(gated_pod(), lambda s: s["nodeSelector"].update({names.HOSTNAME_LABEL: "gke-kueue-chose"}))
    old["spec"]["schedulingGates"] = [{"name": "example.com/other"}]
    new = copy.deepcopy(old)
    new["spec"]["nodeSelector"][names.HOSTNAME_LABEL] = VICTIM
    return Attempt(request(new, "UPDATE"), new, old)


UPDATES: dict[str, Callable[[], Attempt]] = {
    "team member adds a hostname nodeSelector to a gated pod": lambda: Attempt(
        request(ungated(gated_pod()), "UPDATE"), ungated(gated_pod()), gated_pod()
    ),
    "team's service account adds a hostname nodeSelector to a gated pod": lambda: Attempt(
        request(ungated(gated_pod()), "UPDATE", user=TRAINER), ungated(gated_pod()), gated_pod()
    ),
    "team member adds matchFields to a gated pod": lambda: Attempt(
        request(ungated(gated_pod(), EDITS["matchFields metadata.name"]), "UPDATE"),
        ungated(gated_pod(), EDITS["matchFields metadata.name"]),
        gated_pod(),
    ),
    "team member moves Kueue's hostname to another node": _moved,
    "team member sets a hostname nodeSelector on a suspended Job": lambda: Attempt(
        request(_created(_job, EDITS["hostname nodeSelector"]).obj or {}, "UPDATE"),
        _created(_job, EDITS["hostname nodeSelector"]).obj,
        gpu_job(),
    ),
}


def _attacks() -> Iterator[tuple[str, Callable[[], Attempt]]]:
    for target, make in TARGETS.items():
        for edit, change in EDITS.items():
            yield f"{target} with {edit}", functools.partial(_created, make, change)
    yield from UPDATES.items()


ATTACKS = dict(_attacks())


@pytest.fixture(scope="module")
def rendered() -> dict[str, Policies]:
    """region -> the team policies and their bindings, as rendered for that region's cluster."""
    loaded = load(SHIPPED)
    return {r.name: admission.policies(admission.team_policies(loaded, r)) for r in loaded.fleet.regions}


def _refused_by_placement(policies: Policies, namespaces: dict[str, Obj], attempt: Attempt) -> list[str]:
    refused = _refused(policies, namespaces, attempt)
    assert all(o.message for o in refused)
    return [o.message for o in refused if admission.concern(o.policy) == admission.PLACEMENT]


@pytest.mark.parametrize("case", sorted(ATTACKS))
def test_naming_a_node_is_refused(
    case: str, rendered: dict[str, Policies], cluster_namespaces: dict[str, dict[str, Obj]]
) -> None:
    for region, policies in rendered.items():
        attempt = ATTACKS[case]()
        errors = [o for o in _outcomes(policies, cluster_namespaces[region], attempt) if o.error]
        assert not errors, f"{region}: {case}: CEL errors {errors}"
        assert _refused_by_placement(policies, cluster_namespaces[region], attempt), f"{region}: {case} is admitted"


def _kueue(attempt: Attempt) -> Attempt:
    assert attempt.obj is not None
    return Attempt(request(attempt.obj, "UPDATE", user=admission.KUEUE_CONTROLLER), attempt.obj, attempt.old)


def _tas_lifecycle() -> Iterator[tuple[str, Attempt]]:
    """A gkr TAS job's worker pod from creation to its later updates, as the controllers send them."""
    gated = gated_pod()
    yield "KubeRay creates the gated pod", Attempt(request(gated, user=admission.KUBERAY_OPERATOR), gated)
    placed = ungated(gated)
    yield "Kueue's ungater writes the hostname", _kueue(Attempt(request(placed), placed, gated))
    relabelled = copy.deepcopy(placed)
    relabelled["metadata"]["labels"]["example.com/touched"] = "yes"
    yield (
        "KubeRay updates the placed pod",
        Attempt(request(relabelled, "UPDATE", user=admission.KUBERAY_OPERATOR), relabelled, placed),
    )
    yield (
        "the team's account relabels the placed pod",
        Attempt(request(relabelled, "UPDATE", user=TRAINER), relabelled, placed),
    )
    bound = copy.deepcopy(relabelled)
    bound["spec"]["nodeName"] = "gke-kueue-chose"
    yield (
        "the Job controller updates the bound pod",
        Attempt(request(bound, "UPDATE", user=admission.JOB_CONTROLLER), bound, bound),
    )


def test_kueue_topology_placement_is_admitted(
    rendered: dict[str, Policies], cluster_namespaces: dict[str, dict[str, Obj]]
) -> None:
    for region, policies in rendered.items():
        for step, attempt in _tas_lifecycle():
            outcomes = _outcomes(policies, cluster_namespaces[region], attempt)
            assert not [o for o in outcomes if o.denied], f"{region}: {step} refused: {outcomes}"


def test_pod_affinity_inside_the_namespace_is_admitted(
    rendered: dict[str, Policies], cluster_namespaces: dict[str, dict[str, Obj]]
) -> None:
    """Co-locating or spreading a job's own pods stays possible: the own namespace, by default or by name."""
    own = names.team_namespace("research")
    for edit in (_pod_affinity("podAffinity"), _pod_affinity("podAntiAffinity", namespaces=[own])):
        attempt = _created(_job, edit)
        for region, policies in rendered.items():
            outcomes = _outcomes(policies, cluster_namespaces[region], attempt)
            assert not [o for o in outcomes if o.denied], f"{region}: {outcomes}"


def test_kueue_controller_is_the_account_the_fleet_installs(
    trees: dict[str, tuple[ClusterTree, list[Finding]]],
) -> None:
    """Kueue's chart names its service account `<kueue.fullname>-controller-manager`, the full name being the
    release name when it contains "kueue" (charts/kueue/templates/rbac/service_account.yaml, _helpers.tpl,
    v0.19.2), and Argo CD's release name is the Application's name unless helm.releaseName says otherwise
    (https://argo-cd.readthedocs.io/en/stable/user-guide/helm/, "Helm Release Name")."""
    for region, (tree, _) in trees.items():
        (app,) = [
            o
            for o in tree.argocd
            if o.get("kind") == "Application" and o["spec"].get("source", {}).get("path") == argocd.KUEUE_CHART
        ]
        helm = app["spec"]["source"]["helm"]
        assert "releaseName" not in helm, region
        values = helm.get("valuesObject") or {}
        assert not values.get("fullnameOverride"), region
        assert not values.get("nameOverride"), region
        release, namespace = app["metadata"]["name"], app["spec"]["destination"]["namespace"]
        assert "kueue" in release, region
        assert f"system:serviceaccount:{namespace}:{release}-controller-manager" == admission.KUEUE_CONTROLLER


def test_no_tenant_may_bind_create_or_update_a_pod(
    fleet: Fleet, trees: dict[str, tuple[ClusterTree, list[Finding]]]
) -> None:
    """A pod's node is also chosen by a Binding (pods/binding, what the scheduler creates), which these policies
    do not inspect, and a gated pod is edited by UPDATE: both stay out of every tenant's reach by RBAC, so the
    policies above are a second wall, not the only one. Team members and the team's own service account write
    workloads; only controllers write pods."""
    for region, (tree, _) in trees.items():
        objects = [o for _, o in tree.objects()]
        for team in fleet.teams:
            namespace = names.team_namespace(team.name)
            users = [
                User("member@meridian.example.com", ("system:authenticated", team.group)),
                User(f"system:serviceaccount:{namespace}:{names.TRAINER_KSA}"),
            ]
            accesses = [
                Access("create", "", "pods/binding", namespace),
                Access("create", "", "bindings", namespace),
                *(Access(verb, "", "pods", namespace, "p") for verb in ("create", "update", "patch")),
            ]
            # The users are the ones RBAC knows: what each may write, it may.
            assert allowed(objects, users[0], Access("create", "batch", "jobs", namespace)), region
            assert allowed(objects, users[1], Access("create", "", "events", namespace)), region
            for user in users:
                for access in accesses:
                    assert not allowed(objects, user, access), (region, user.name, access)
