"""Argo CD for one cluster: projects, the applications, and the root that owns them.

Each cluster runs its own Argo CD and pulls this repository (see
argocd/README.md for why). The root application (app-of-apps) syncs
`argocd/clusters/<cluster>/apps`, whose Applications run in waves:

    -3 argocd (self-managed, with health checks) -> -2 CRDs -> -1 operators
    -> 0 namespaces, networks and the registry -> 1 queues -> 2 platform services -> 3 workloads
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from contract.registry import REGISTRY_NAMESPACE
from fleet import images, names, upstream
from fleet.gitops import kueue
from fleet.gitops.objects import Obj, dump, obj
from fleet.model import Fleet, Region

API = "argoproj.io/v1alpha1"
NAMESPACE = names.ARGOCD_NAMESPACE
IN_CLUSTER = "https://kubernetes.default.svc"

# Every upstream source is a git repository at the commit its release tag names (fleet.upstream):
# charts are rendered from their folder in that commit, so no chart repository is read at sync time.
ARGOCD_REPO = upstream.ARGOCD.repo
KUBERAY_REPO = upstream.KUBERAY.repo
KUEUE_REPO = upstream.KUEUE.repo
KUBERAY_CHART = "helm-chart/kuberay-operator"  # kuberay: what the kuberay-helm repository publishes, same version
KUEUE_CHART = "charts/kueue"  # kueue: the released chart before hack/helm-chart-package.sh sets its image values

KUBERAY_VALUES = {"metrics": {"enabled": True, "serviceMonitor": {"enabled": False}}}
OVERLAY_APPS = (
    "teams",
    "registry",
    "gpu-networking",
    "kueue-config",
    "warden",
    "training-images",
    "workloads",
    "monitoring",
)

# Argo CD has no health assessment for these kinds: without one, waves would not
# wait for child applications, and Ray resources would always look healthy.
HEALTH_APPLICATION = """hs = {status = "Progressing", message = ""}
if obj.status ~= nil and obj.status.health ~= nil then
  hs.status = obj.status.health.status
  if obj.status.health.message ~= nil then hs.message = obj.status.health.message end
end
return hs
"""
HEALTH_RAYCLUSTER = """hs = {status = "Progressing", message = "waiting for the head pod"}
if obj.status ~= nil and obj.status.conditions ~= nil then
  local provisioned, headReady = false, false
  for _, c in ipairs(obj.status.conditions) do
    if c.type == "RayClusterProvisioned" and c.status == "True" then provisioned = true end
    if c.type == "HeadPodReady" and c.status == "True" then headReady = true end
    if c.type == "ReplicaFailure" and c.status == "True" then
      return {status = "Degraded", message = c.message or "replica failure"}
    end
  end
  if provisioned and headReady then hs = {status = "Healthy", message = "head ready, workers provisioned"} end
end
if obj.spec ~= nil and obj.spec.suspend == true then hs = {status = "Suspended", message = "suspended"} end
return hs
"""
HEALTH_RAYJOB = """hs = {status = "Progressing", message = ""}
if obj.status ~= nil and obj.status.jobDeploymentStatus ~= nil then
  local s = obj.status.jobDeploymentStatus
  hs.message = s
  if s == "Complete" then hs.status = "Healthy"
  elseif s == "Failed" or s == "ValidationFailed" then hs.status = "Degraded"
  elseif s == "Suspended" or s == "Suspending" then hs.status = "Suspended"
  end
end
return hs
"""


@dataclass(frozen=True)
class App:
    name: str
    wave: int
    project: str
    source: dict[str, Any]
    namespace: str
    prune: bool = True
    sync_options: tuple[str, ...] = ()
    ignore: list[dict[str, Any]] = field(default_factory=list)
    namespace_labels: dict[str, str] = field(default_factory=dict)  # on the namespace CreateNamespace makes


def operator_namespace_labels(fleet: Fleet) -> dict[str, str]:
    """Pod Security for the upstream operators' namespaces: baseline enforced, restricted audited and warned.

    Their charts are not rendered here, so whether they pass "restricted" is unverified; baseline
    refuses privileged pods and host namespaces and paths, which no operator needs.
    """
    version = f"v{fleet.versions.kubernetes}"
    labels = {}
    for mode, level in (("enforce", "baseline"), ("audit", "restricted"), ("warn", "restricted")):
        labels[f"pod-security.kubernetes.io/{mode}"] = level
        labels[f"pod-security.kubernetes.io/{mode}-version"] = version
    return labels


def overlay_path(fleet: Fleet, region: Region, app: str) -> str:
    return f"kustomize/overlays/{fleet.cluster_name(region)}/{app}"


CLUSTERS_DIR = "argocd/clusters"


def apps_path(fleet: Fleet, region: Region) -> str:
    return f"{CLUSTERS_DIR}/{fleet.cluster_name(region)}/apps"


def _argocd_config_patch() -> dict[str, Any]:
    data = {
        "resource.customizations.health.argoproj.io_Application": HEALTH_APPLICATION,
        "resource.customizations.health.ray.io_RayCluster": HEALTH_RAYCLUSTER,
        "resource.customizations.health.ray.io_RayJob": HEALTH_RAYJOB,
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "argocd-cm", "namespace": NAMESPACE},
        "data": data,
    }


def argocd_config_patch_yaml() -> str:
    return dump([_argocd_config_patch()]).split("\n", 1)[1]  # without the header: it is embedded


# Fields that controllers own: Argo CD must not fight over them.
CONTROLLER_FIELDS = [
    {
        "group": "ray.io",
        "kind": "RayCluster",
        "jqPathExpressions": [".spec.workerGroupSpecs[].replicas", ".spec.suspend"],
    },
    {
        "group": "ray.io",
        "kind": "RayJob",
        "jqPathExpressions": [
            ".spec.suspend",
            ".spec.rayClusterSpec.workerGroupSpecs[].replicas",
            ".spec.rayClusterSpec.headGroupSpec.template.spec.nodeSelector",
            ".spec.rayClusterSpec.headGroupSpec.template.spec.tolerations",
            ".spec.rayClusterSpec.workerGroupSpecs[].template.spec.nodeSelector",
            ".spec.rayClusterSpec.workerGroupSpecs[].template.spec.tolerations",
        ],
    },
    {
        "group": "batch",
        "kind": "Job",
        "jqPathExpressions": [".spec.suspend", ".spec.template.spec.nodeSelector", ".spec.template.spec.tolerations"],
    },
]


def argocd_app(fleet: Fleet) -> App:
    """Argo CD manages itself, with the health checks of the kinds it waits on."""
    return App(
        "argocd",
        -3,
        "platform",
        {
            "repoURL": ARGOCD_REPO,
            "targetRevision": upstream.commit(upstream.ARGOCD, fleet),
            "path": "manifests/cluster-install",
            "kustomize": {
                "patches": [{"target": {"kind": "ConfigMap", "name": "argocd-cm"}, "patch": argocd_config_patch_yaml()}]
            },
        },
        NAMESPACE,
        prune=False,  # Argo CD never deletes parts of itself
        sync_options=("ServerSideApply=true",),
    )


def operator_apps(fleet: Fleet) -> list[App]:
    """KubeRay and Kueue, from their git repositories at the commits of the versions fleet.yaml pins.

    Their Helm charts come from the chart folder in that commit (Chart.yaml there: version 1.7.0 for
    kuberay-operator, with image quay.io/kuberay/operator:v1.7.0 in values.yaml; 0.19.2 for kueue, whose
    release image values are set here as its release packaging sets them: kueue.chart_values).
    """
    kuberay, kueue_commit = upstream.commit(upstream.KUBERAY, fleet), upstream.commit(upstream.KUEUE, fleet)
    return [
        # CRDs are far above client-side apply's size limit, and deleting one deletes every
        # RayCluster and RayJob: server-side apply, never pruned.
        App(
            "kuberay-crds",
            -2,
            "platform",
            {"repoURL": KUBERAY_REPO, "targetRevision": kuberay, "path": "ray-operator/config/crd"},
            "ray-system",
            prune=False,
            sync_options=("ServerSideApply=true",),
        ),
        App(
            "kuberay-operator",
            -1,
            "platform",
            {
                "repoURL": KUBERAY_REPO,
                "targetRevision": kuberay,
                "path": KUBERAY_CHART,
                # metrics.enabled is the chart's default, written down because the PodMonitoring scrapes it; the
                # chart's ServiceMonitor is the Prometheus operator's kind, which GMP does not read
                # (helm-chart/kuberay-operator/values.yaml).
                "helm": {"skipCrds": True, "valuesObject": KUBERAY_VALUES},
            },
            "ray-system",
            sync_options=("CreateNamespace=true", "ServerSideApply=true"),
            namespace_labels=operator_namespace_labels(fleet),
        ),
        App(
            "kueue",
            -1,
            "platform",
            {
                "repoURL": KUEUE_REPO,
                "targetRevision": kueue_commit,
                "path": KUEUE_CHART,
                # the release's controller image; the manager config: waitForPodsReady
                "helm": {"valuesObject": kueue.chart_values(images.upstream_image("kueue", fleet))},
            },
            "kueue-system",
            prune=False,  # carries Kueue's CRDs
            sync_options=("CreateNamespace=true", "ServerSideApply=true"),
            namespace_labels=operator_namespace_labels(fleet),
        ),
    ]


def overlay_apps(fleet: Fleet, region: Region) -> list[App]:
    """The applications built from this repository's overlays for the region's cluster."""
    repo = {"repoURL": fleet.gitops.repo, "targetRevision": fleet.gitops.revision}

    def overlay(app: str) -> dict[str, Any]:
        return {**repo, "path": overlay_path(fleet, region, app)}

    return [
        # Namespaces, RBAC and quotas: the tenancy boundary, so the project that may grant rights.
        App("teams", 0, "platform", overlay("teams"), "default"),
        # The registry gkr reads, and who may read it (RBAC): the platform project. Server-side apply: no
        # last-applied annotation copies the ConfigMap (fleet.gitops.registry).
        App("registry", 0, "platform", overlay("registry"), REGISTRY_NAMESPACE, sync_options=("ServerSideApply=true",)),
        App("gpu-networking", 0, "fleet-config", overlay("gpu-networking"), "kube-system"),
        App(
            "kueue-config",
            1,
            "fleet-config",
            overlay("kueue-config"),
            "kueue-system",
            sync_options=("ServerSideApply=true",),
        ),
        # Warden cordons and drains nodes: cluster-wide RBAC, so the platform project.
        App("warden", 2, "platform", overlay("warden"), names.WARDEN_NAMESPACE),
        App("training-images", 2, "fleet-config", overlay("training-images"), "meridian-images"),
        # Scrape objects and alert rules for GMP, and the Kueue scraper's token and RBAC: the platform project.
        App("monitoring", 2, "platform", overlay("monitoring"), "default"),
        App(
            "workloads",
            3,
            "fleet-config",
            overlay("workloads"),
            "default",
            sync_options=("RespectIgnoreDifferences=true",),
            ignore=CONTROLLER_FIELDS,
        ),
    ]


def cluster_apps(fleet: Fleet, region: Region) -> list[App]:
    """Every application the cluster's root syncs: upstream first, then this repository's overlays."""
    return [argocd_app(fleet), *operator_apps(fleet), *overlay_apps(fleet, region)]


def application(app: App) -> Obj:
    sync: dict[str, Any] = {
        "automated": {"prune": app.prune, "selfHeal": True},
        "retry": {"limit": 10, "backoff": {"duration": "10s", "factor": 2, "maxDuration": "5m"}},
    }
    if app.sync_options:
        sync["syncOptions"] = list(app.sync_options)
    if app.namespace_labels:
        sync["managedNamespaceMetadata"] = {"labels": dict(app.namespace_labels)}
    spec: dict[str, Any] = {
        "project": app.project,
        "source": app.source,
        "destination": {"server": IN_CLUSTER, "namespace": app.namespace},
        "syncPolicy": sync,
    }
    if app.ignore:
        spec["ignoreDifferences"] = app.ignore
    application = obj(
        API, "Application", app.name, NAMESPACE, annotations={"argocd.argoproj.io/sync-wave": str(app.wave)}, spec=spec
    )
    # Deleting an Application deletes what it deployed (cascading), except where prune is off.
    if app.prune:
        application["metadata"]["finalizers"] = ["resources-finalizer.argocd.argoproj.io"]
    return application


def _kinds(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"group": group, "kind": kind} for group, kind in pairs]


# Cluster-scoped kinds that grant rights or change the API itself: only the platform project may create them.
PRIVILEGED_KINDS = (
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"),
    ("apiregistration.k8s.io", "APIService"),
)
# Argo CD's own kinds: only the bootstrap project (the root application) creates them.
ARGOCD_KINDS = (("argoproj.io", "Application"), ("argoproj.io", "AppProject"), ("argoproj.io", "ApplicationSet"))
KUEUE_CLUSTER_KINDS = (
    "Topology",
    "Cohort",
    "ResourceFlavor",
    "ClusterQueue",
    "WorkloadPriorityClass",
    "AdmissionCheck",
    "ProvisioningRequestConfig",
)
IMAGES_NAMESPACE = "meridian-images"
# Google Cloud Managed Service for Prometheus: cluster-wide scraping and alert rules (fleet.gitops.monitoring).
MONITORING_CLUSTER_KINDS = (
    ("monitoring.googleapis.com", "ClusterPodMonitoring"),
    ("monitoring.googleapis.com", "ClusterRules"),
)


def projects(fleet: Fleet) -> list[Obj]:
    """Least privilege: each project names its sources, namespaces and every kind it may create.

    platform: upstream components and this repository's tenancy (teams), registry and Warden, the only project that may
    grant rights cluster-wide or extend the API; never Argo CD's own kinds. fleet-config: configuration that
    grants nothing (Kueue objects, GPU networks, DaemonSets), no RBAC at all. See argocd/README.md.
    """
    team_namespaces = [names.team_namespace(t.name) for t in fleet.teams]

    def destinations(*namespaces: str) -> list[dict[str, str]]:
        return [{"server": IN_CLUSTER, "namespace": ns} for ns in namespaces]

    platform = {
        "description": "Upstream components (Argo CD, KubeRay, Kueue), team tenancy, the registry and Warden: "
        "may grant rights",
        "sourceRepos": [ARGOCD_REPO, KUBERAY_REPO, KUEUE_REPO, fleet.gitops.repo],
        "destinations": destinations(
            NAMESPACE,
            "ray-system",
            "kueue-system",
            names.WARDEN_NAMESPACE,
            names.SWEEP_NAMESPACE,  # Warden's deep check Jobs' namespace, its LocalQueue and Role (fleet.gitops.warden)
            REGISTRY_NAMESPACE,
            "default",
            *team_namespaces,
        ),
        "clusterResourceWhitelist": _kinds(*PRIVILEGED_KINDS, ("", "Namespace"), *MONITORING_CLUSTER_KINDS),
        # The upstream manifests hold every namespaced kind; Argo CD's own objects come from bootstrap alone.
        "namespaceResourceBlacklist": _kinds(*ARGOCD_KINDS),
    }
    config = {
        "description": "Configuration generated from fleet.yaml: queues, GPU networks, node DaemonSets; no RBAC",
        "sourceRepos": [fleet.gitops.repo],
        "destinations": destinations("default", "kube-system", "kueue-system", IMAGES_NAMESPACE, *team_namespaces),
        "clusterResourceWhitelist": [
            {"group": "", "kind": "Namespace", "name": IMAGES_NAMESPACE},  # name-restricted (Argo CD >= 3.x)
            # Warden's sweeps' pod priority: below every pod, never preempting (fleet.gitops.kueue); grants nothing.
            {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": names.SWEEP_PRIORITY},
            *_kinds(
                ("networking.gke.io", "GKENetworkParamSet"),
                ("networking.gke.io", "Network"),
                *(("kueue.x-k8s.io", kind) for kind in KUEUE_CLUSTER_KINDS),
            ),
        ],
        "namespaceResourceWhitelist": _kinds(
            ("apps", "DaemonSet"),  # the NCCL installer and the image pre-pull
            ("networking.k8s.io", "NetworkPolicy"),  # the pre-pull namespace takes no ingress
            ("kueue.x-k8s.io", "LocalQueue"),
            ("ray.io", "RayCluster"),  # `workloads`: platform Ray resources
            ("ray.io", "RayJob"),
        ),
    }
    return [
        obj(API, "AppProject", name, NAMESPACE, spec=spec)
        for name, spec in (("platform", platform), ("fleet-config", config))
    ]


def _listed(entries: list[dict[str, str]] | None, group: str, kind: str, name: str) -> bool:
    """Argo CD's match of a resource against a whitelist or blacklist: globs on group and kind, and on name if given."""
    return any(
        fnmatchcase(group, e.get("group", ""))
        and fnmatchcase(kind, e.get("kind", ""))
        and fnmatchcase(name, e.get("name") or "*")
        for e in entries or []
    )


def refusal(
    project: dict[str, Any], group: str, kind: str, name: str, namespace: str, server: str = IN_CLUSTER
) -> str | None:
    """Why an Argo CD project refuses to sync the resource, or None if it permits it.

    Mirrors AppProject.IsGroupKindNamePermitted and IsDestinationPermitted (argo-cd
    pkg/apis/application/v1alpha1/app_project_types.go): a namespaced resource needs no whitelist entry when the
    project has no namespaceResourceWhitelist at all (an empty one permits nothing); a cluster-scoped one must be in
    clusterResourceWhitelist; a blacklist wins; the namespace must match a destination. `namespace` is "" for a
    cluster-scoped resource. Destination globs only: this repository uses no `!` negations.
    """
    namespaced = bool(namespace)
    white = project.get("namespaceResourceWhitelist" if namespaced else "clusterResourceWhitelist")
    black = project.get("namespaceResourceBlacklist" if namespaced else "clusterResourceBlacklist")
    scope = "namespaced" if namespaced else "cluster-scoped"
    # No namespaced whitelist at all permits every namespaced kind; an empty one, none.
    if not ((namespaced and white is None) or _listed(white, group, kind, name)):
        return f"{scope} {group or 'core'}/{kind} {name} is not whitelisted"
    if _listed(black, group, kind, name):
        return f"{scope} {group or 'core'}/{kind} {name} is blacklisted"
    if namespaced and not any(
        fnmatchcase(server, d.get("server", "")) and fnmatchcase(namespace, d.get("namespace", ""))
        for d in project.get("destinations", [])
    ):
        return f"namespace {namespace} is not a destination"
    return None


def source_permitted(project: dict[str, Any], repo_url: str) -> bool:
    return any(fnmatchcase(repo_url, pattern) for pattern in project.get("sourceRepos", []))


# An operator pauses one application's automated sync, and so its self-heal, by setting this field to false, as the
# runbooks do before they change what that application manages (argo-cd v3.5.1 docs/user-guide/auto_sync.md;
# controller/appcontroller.go autoSync returns at once unless SyncPolicy.IsAutomatedSyncEnabled, types.go: false
# only when `enabled` is false). The root application would put the field back at its next sync, so it ignores this
# one field and keeps the live value when it syncs (docs/operator-manual/cluster-bootstrapping.md, "Ignoring
# differences in child applications"; docs/user-guide/sync-options.md, RespectIgnoreDifferences). Git never sets it.
# Not `argocd app set --sync-policy none`: that removes `automated` (cmd/util/app.go), which the root puts back.
PAUSE_POINTER = "/spec/syncPolicy/automated/enabled"
PAUSABLE = {"group": "argoproj.io", "kind": "Application", "jsonPointers": [PAUSE_POINTER]}


def root(fleet: Fleet, region: Region) -> list[Obj]:
    """What bootstrap applies once: a project that may only manage Argo CD objects, and the root app."""
    project = obj(
        API,
        "AppProject",
        "bootstrap",
        NAMESPACE,
        spec={
            "description": "The root application: Argo CD projects and applications only",
            "sourceRepos": [fleet.gitops.repo],
            "destinations": [{"server": IN_CLUSTER, "namespace": NAMESPACE}],
            "clusterResourceWhitelist": [],
            "namespaceResourceWhitelist": _kinds(("argoproj.io", "Application"), ("argoproj.io", "AppProject")),
        },
    )
    app = application(
        App(
            "root",
            0,
            "bootstrap",
            {"repoURL": fleet.gitops.repo, "targetRevision": fleet.gitops.revision, "path": apps_path(fleet, region)},
            NAMESPACE,
            sync_options=("RespectIgnoreDifferences=true",),
            ignore=[PAUSABLE],
        )
    )
    return [project, app]
