"""Where the pinned upstream CRDs come from, for machines without ../shared/crds."""

from __future__ import annotations

from fleet import upstream
from fleet.gitops.validate import GKE_NETWORKING_API, GMP_API
from fleet.model import Fleet

RAW = "https://raw.githubusercontent.com"


def crd_sources(fleet: Fleet) -> list[tuple[str, str]]:
    """(path under a CRD root, URL) for every CRD the validation needs, at the pinned versions (the commits
    fleet.upstream records for KubeRay, Kueue and Argo CD, the same content Argo CD installs)."""
    v = fleet.versions
    kuberay_at, kueue_at = upstream.commit(upstream.KUBERAY, fleet), upstream.commit(upstream.KUEUE, fleet)
    argocd_at = upstream.commit(upstream.ARGOCD, fleet)
    kuberay = [f"ray.io_{p}.yaml" for p in ("rayclusters", "rayjobs", "rayservices", "raycronjobs")]
    kueue = [
        f"kueue.x-k8s.io_{p}.yaml"
        for p in (
            "admissionchecks",
            "clusterqueues",
            "cohorts",
            "localqueues",
            "provisioningrequestconfigs",
            "resourceflavors",
            "topologies",
            "workloadpriorityclasses",
            "workloads",
        )
    ]
    argo = ["application-crd.yaml", "applicationset-crd.yaml", "appproject-crd.yaml"]
    networking = ["networking.gke.io_gkenetworkparamsets.yaml", "networking.gke.io_networks.yaml"]
    gmp = [
        f"monitoring.googleapis.com_{p}.yaml"
        for p in (
            "clusternodemonitorings",
            "clusterpodmonitorings",
            "clusterrules",
            "globalrules",
            "operatorconfigs",
            "podmonitorings",
            "rules",
        )
    ]
    return [
        *(
            (f"kuberay/v{v.kuberay}/{f}", f"{RAW}/ray-project/kuberay/{kuberay_at}/ray-operator/config/crd/bases/{f}")
            for f in kuberay
        ),
        *(
            (f"kueue/v{v.kueue}/{f}", f"{RAW}/kubernetes-sigs/kueue/{kueue_at}/config/components/crd/bases/{f}")
            for f in kueue
        ),
        *((f"argo-cd/v{v.argocd}/{f}", f"{RAW}/argoproj/argo-cd/{argocd_at}/manifests/crds/{f}") for f in argo),
        *(
            (
                f"gke-networking-api/{GKE_NETWORKING_API}/{f}",
                f"{RAW}/GoogleCloudPlatform/gke-networking-api/{GKE_NETWORKING_API}/config/crds/{f}",
            )
            for f in networking
        ),
        *(
            (
                f"prometheus-engine/{GMP_API}/{f}",
                f"{RAW}/GoogleCloudPlatform/prometheus-engine/{GMP_API}/charts/operator/crds/{f}",
            )
            for f in gmp
        ),
    ]
