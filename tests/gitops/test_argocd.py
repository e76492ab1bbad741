"""The Argo CD tree: waves, sync options, ignored fields, health checks, least-privilege projects."""

from __future__ import annotations

from typing import Any

import yaml

from fleet import upstream
from fleet.gitops import argocd
from fleet.model import Fleet


def _apps(fleet: Fleet) -> dict[str, dict[str, Any]]:
    return {a.name: argocd.application(a) for a in argocd.cluster_apps(fleet, fleet.regions[0])}


def test_waves_put_crds_before_operators_before_configuration(fleet: Fleet) -> None:
    waves = {
        name: int(app["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"]) for name, app in _apps(fleet).items()
    }
    assert waves["argocd"] < waves["kuberay-crds"] < waves["kuberay-operator"] <= waves["kueue"]
    assert waves["kueue"] < waves["teams"] < waves["kueue-config"] < waves["warden"] < waves["workloads"]


def test_crds_use_server_side_apply_and_are_never_pruned(fleet: Fleet) -> None:
    apps = _apps(fleet)
    crds = apps["kuberay-crds"]["spec"]
    assert "ServerSideApply=true" in crds["syncPolicy"]["syncOptions"]
    assert crds["syncPolicy"]["automated"]["prune"] is False
    assert crds["source"] == {
        "repoURL": argocd.KUBERAY_REPO,
        "targetRevision": "59d663aeec13760646da3db9c1cf8cfe883e30b7",  # the commit tag v1.7.0 names
        "path": "ray-operator/config/crd",
    }
    assert "finalizers" not in apps["kuberay-crds"]["metadata"]  # deleting the app must not delete the CRDs
    operator = apps["kuberay-operator"]["spec"]["source"]
    assert operator["helm"] == {"skipCrds": True, "valuesObject": argocd.KUBERAY_VALUES}
    assert (operator["repoURL"], operator["path"]) == (argocd.KUBERAY_REPO, "helm-chart/kuberay-operator")
    assert operator["targetRevision"] == crds["source"]["targetRevision"]
    assert "ServerSideApply=true" in apps["kueue"]["spec"]["syncPolicy"]["syncOptions"]
    assert apps["kueue"]["spec"]["source"]["targetRevision"] == "8eab68778fc1b52affe165fdf5af29d1e9b4f3cb"  # v0.19.2


def test_controller_owned_fields_are_ignored(fleet: Fleet) -> None:
    workloads = _apps(fleet)["workloads"]["spec"]
    assert "RespectIgnoreDifferences=true" in workloads["syncPolicy"]["syncOptions"]
    ignored = {(i["group"], i["kind"]): i["jqPathExpressions"] for i in workloads["ignoreDifferences"]}
    assert ".spec.workerGroupSpecs[].replicas" in ignored[("ray.io", "RayCluster")]
    assert ".spec.suspend" in ignored[("ray.io", "RayJob")]


def test_every_app_retries_with_backoff_and_heals(fleet: Fleet) -> None:
    for app in _apps(fleet).values():
        policy = app["spec"]["syncPolicy"]
        assert policy["automated"]["selfHeal"] is True
        assert policy["retry"]["backoff"]["factor"] == 2


def test_argocd_manages_itself_with_health_checks(fleet: Fleet) -> None:
    source = _apps(fleet)["argocd"]["spec"]["source"]
    assert source["targetRevision"] == "109ca7ca71139e514114499d294a492e7910a965"  # the commit tag v3.5.1 names
    (patch,) = source["kustomize"]["patches"]
    data = yaml.safe_load(patch["patch"])["data"]
    assert set(data) == {
        "resource.customizations.health.argoproj.io_Application",
        "resource.customizations.health.ray.io_RayCluster",
        "resource.customizations.health.ray.io_RayJob",
    }
    assert "HeadPodReady" in data["resource.customizations.health.ray.io_RayCluster"]
    assert "jobDeploymentStatus" in data["resource.customizations.health.ray.io_RayJob"]


def test_projects_are_least_privilege(fleet: Fleet) -> None:
    projects = {p["metadata"]["name"]: p["spec"] for p in argocd.projects(fleet)}
    config = projects["fleet-config"]
    assert config["sourceRepos"] == [fleet.gitops.repo]
    kinds = {k["kind"] for k in config["clusterResourceWhitelist"]}
    assert "CustomResourceDefinition" not in kinds
    assert {"ClusterQueue", "ResourceFlavor", "GKENetworkParamSet", "Namespace"} <= kinds
    assert "CustomResourceDefinition" in {k["kind"] for k in projects["platform"]["clusterResourceWhitelist"]}
    # No RBAC or API extensions from fleet-config (tests/gitops/test_projects.py checks each object).
    assert not kinds & {k for _, k in argocd.PRIVILEGED_KINDS}
    assert {k["kind"] for k in config["namespaceResourceWhitelist"]} == {
        "DaemonSet",
        "LocalQueue",
        "NetworkPolicy",
        "RayCluster",
        "RayJob",
    }
    for spec in projects.values():
        assert all(d["server"] == argocd.IN_CLUSTER and d["namespace"] != "*" for d in spec["destinations"])
    bootstrap, _ = argocd.root(fleet, fleet.regions[0])
    assert bootstrap["spec"]["clusterResourceWhitelist"] == []


def test_every_application_of_this_repo_points_at_its_cluster(fleet: Fleet) -> None:
    for region in fleet.regions:
        cluster = fleet.cluster_name(region)
        for app in argocd.cluster_apps(fleet, region):
            if app.source.get("repoURL") == fleet.gitops.repo:
                assert app.source["path"] == f"kustomize/overlays/{cluster}/{app.name}"


# Kueue v0.19.2 Configuration (config.kueue.x-k8s.io/v1beta2), apis/config/v1beta2/configuration_types.go:
# the manager decodes it strictly, so an unknown key (v1beta1's `waitForPodsReady.enable`) stops it.
KUEUE_CONFIG_KEYS = {
    "apiVersion",
    "kind",
    "namespace",
    "manageJobsWithoutQueueName",
    "managedJobsNamespaceSelector",
    "internalCertManagement",
    "waitForPodsReady",
    "clientConnection",
    "integrations",
    "multiKueue",
    "fairSharing",
    "admissionFairSharing",
    "resources",
    "featureGates",
    "objectRetentionPolicies",
    "visibilityServer",
    "webhook",
    "leaderElection",
    "metrics",
    "health",
    "pprofBindAddress",
    "controller",
    "tls",
}
WAIT_FOR_PODS_READY_KEYS = {"timeout", "blockAdmission", "requeuingStrategy", "recoveryTimeout"}
REQUEUING_KEYS = {"timestamp", "backoffLimitCount", "backoffBaseSeconds", "backoffMaxSeconds"}


def _seconds(duration: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600}
    return int(duration[:-1]) * units[duration[-1]]


def test_kueue_evicts_a_gang_that_cannot_start_and_requeues_it_with_backoff(fleet: Fleet) -> None:
    source = _apps(fleet)["kueue"]["spec"]["source"]
    assert (source["repoURL"], source["path"]) == (argocd.KUEUE_REPO, "charts/kueue")
    config = yaml.safe_load(source["helm"]["valuesObject"]["managerConfig"]["controllerManagerConfigYaml"])
    assert (config["apiVersion"], config["kind"]) == ("config.kueue.x-k8s.io/v1beta2", "Configuration")
    assert set(config) <= KUEUE_CONFIG_KEYS
    wait = config["waitForPodsReady"]
    assert set(wait) <= WAIT_FOR_PODS_READY_KEYS
    assert 0 < _seconds(wait["timeout"]) <= 3600
    assert _seconds(wait["recoveryTimeout"]) > 0
    assert wait["blockAdmission"] is False
    strategy = wait["requeuingStrategy"]
    assert set(strategy) <= REQUEUING_KEYS
    assert strategy["timestamp"] == "Eviction"  # an evicted gang goes behind the others, not back to the front
    assert 0 < strategy["backoffBaseSeconds"] <= strategy["backoffMaxSeconds"]
    assert strategy["backoffLimitCount"] > 0
    # The chart's defaults stay otherwise (jobs without a queue name: tests/gitops/test_quota.py).
    assert {"batch/job", "ray.io/rayjob", "ray.io/raycluster"} <= set(config["integrations"]["frameworks"])
    assert config["leaderElection"]["leaderElect"] is True


def test_every_namespace_argocd_creates_carries_pod_security_labels(fleet: Fleet) -> None:
    # A namespace made by CreateNamespace=true has no labels unless the app names them: Pod Security
    # would then fall back to the cluster default (privileged on GKE).
    for name, app in _apps(fleet).items():
        sync = app["spec"]["syncPolicy"]
        if "CreateNamespace=true" not in sync.get("syncOptions", []):
            continue
        labels = sync["managedNamespaceMetadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "baseline", name
        assert labels["pod-security.kubernetes.io/audit"] == "restricted", name
        assert labels["pod-security.kubernetes.io/enforce-version"] == f"v{fleet.versions.kubernetes}", name


def test_every_upstream_source_is_a_commit_of_its_pinned_release(fleet: Fleet) -> None:
    # A tag or chart version can be re-published; Argo CD syncs a commit as it was reviewed.
    repos = {u.repo: u for u in upstream.UPSTREAMS}
    upstream_apps = {n: a for n, a in _apps(fleet).items() if a["spec"]["source"]["repoURL"] != fleet.gitops.repo}
    assert set(upstream_apps) == {"argocd", "kuberay-crds", "kuberay-operator", "kueue"}
    for name, app in upstream_apps.items():
        source = app["spec"]["source"]
        release = repos[source["repoURL"]]
        assert "chart" not in source, name
        assert source["targetRevision"] == release.commits[upstream.version(release, fleet)], name


def test_kueue_runs_the_released_controller_image_not_the_staging_build(fleet: Fleet) -> None:
    # charts/kueue/values.yaml in git names k8s-staging-images/kueue/kueue:release-0.19, pulled Always; the
    # release packaging (hack/helm-chart-package.sh) rewrites it, and so must the application's values.
    image = _apps(fleet)["kueue"]["spec"]["source"]["helm"]["valuesObject"]["controllerManager"]["manager"]["image"]
    assert image == {"repository": "registry.k8s.io/kueue/kueue", "tag": "v0.19.2", "pullPolicy": "IfNotPresent"}
