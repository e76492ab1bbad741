"""The one-time bootstrap of a cluster's own Argo CD.

After it, Argo CD manages everything, itself included (the `argocd`
application upgrades it to the pinned version and adds the health checks).
"""

from __future__ import annotations

from fleet import upstream
from fleet.gitops import argocd
from fleet.model import Fleet, Region


def install_source(fleet: Fleet) -> str:
    """Argo CD's install, at the commit of the pinned release (a tag could be moved before a bootstrap)."""
    commit = upstream.commit(upstream.ARGOCD, fleet)
    return f"{argocd.ARGOCD_REPO.removesuffix('.git')}//manifests/cluster-install?ref={commit}"


def bootstrap_commands(fleet: Fleet, region: Region) -> list[list[str]]:
    cluster = fleet.cluster_name(region)
    root = f"{argocd.apps_path(fleet, region).rsplit('/', 1)[0]}/root.yaml"
    ns = argocd.NAMESPACE
    return [
        # The DNS endpoint: IAM-checked, no IP allowlist, reachable from anywhere with credentials.
        [
            "gcloud",
            "container",
            "clusters",
            "get-credentials",
            cluster,
            f"--region={region.name}",
            f"--project={fleet.project.id}",
            "--dns-endpoint",
        ],
        ["kubectl", "apply", "--server-side", "-f", "-"],  # the namespace, from stdin
        ["kubectl", "apply", "--server-side", "--force-conflicts", "-n", ns, "-k", install_source(fleet)],
        ["kubectl", "-n", ns, "rollout", "status", "deployment/argocd-repo-server", "--timeout=10m"],
        ["kubectl", "-n", ns, "rollout", "status", "statefulset/argocd-application-controller", "--timeout=10m"],
        ["kubectl", "apply", "--server-side", "-f", root],
    ]


NAMESPACE_MANIFEST = f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {argocd.NAMESPACE}\n"
