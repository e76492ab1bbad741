"""Argo CD Applications as the API server holds and writes them, for the admission tests of the operators' guard.

The rendered Application is what git holds; a live one also carries what the API server and Argo CD write: the
server's metadata and Argo CD's `status` (argo-cd v3.5.1 pkg/apis/application/v1alpha1/types.go,
ApplicationStatus; the CRD has no status subresource, so status lives on the object itself). A `kubectl patch
--type merge` is applied as RFC 7386 says, and the API server's own metadata moves on every write before
validating admission sees the object (k8s.io/apiserver pkg/registry/generic/registry/store.go Update:
BeforeUpdate, then the admission validation).
"""

from __future__ import annotations

import copy
from typing import Any

from fleet import names
from fleet.gitops.check import ClusterTree
from tests.tenancy.vap import Request

Obj = dict[str, Any]
CONTROLLER = "system:serviceaccount:argocd:argocd-application-controller"  # contract.names.ARGOCD_KSAS
SERVER = "system:serviceaccount:argocd:argocd-server"  # the Argo CD API server (UI, CLI): its Sync sets `operation`
SERVICE_ACCOUNT_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:argocd", "system:authenticated")
ARGOCD_NAMESPACE = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {"name": names.ARGOCD_NAMESPACE, "labels": {"kubernetes.io/metadata.name": names.ARGOCD_NAMESPACE}},
}


def rendered(tree: ClusterTree, name: str) -> Obj:
    return copy.deepcopy(next(o for o in tree.argocd if o["kind"] == "Application" and o["metadata"]["name"] == name))


def live(tree: ClusterTree, name: str) -> Obj:
    """The Application as the API server stores it after some syncs: the server's metadata and Argo CD's status."""
    app = rendered(tree, name)
    app["metadata"] |= {
        "uid": "8d0f7a52-0000-4000-8000-000000000001",
        "resourceVersion": "41",
        "generation": 7,
        "creationTimestamp": "2026-01-05T10:00:00Z",
        "managedFields": [
            {"manager": "argocd-controller", "operation": "Update", "apiVersion": "argoproj.io/v1alpha1"}
        ],
    }
    source = app["spec"]["source"]
    synced = {"revision": "0123456789abcdef0123456789abcdef01234567", "source": copy.deepcopy(source)}
    app["status"] = {
        "sync": {"status": "Synced", "revision": synced["revision"], "comparedTo": {"source": copy.deepcopy(source)}},
        "health": {"status": "Healthy", "lastTransitionTime": "2026-01-05T10:02:00Z"},
        "history": [{"id": 3, "deployedAt": "2026-01-05T10:01:00Z", **synced}],
        "operationState": {
            "phase": "Succeeded",
            "message": "successfully synced (all tasks run)",
            "startedAt": "2026-01-05T10:00:30Z",
            "finishedAt": "2026-01-05T10:01:00Z",
            "operation": {"sync": {"revision": synced["revision"]}, "initiatedBy": {"automated": True}},
            "syncResult": synced,
        },
        "resources": [{"group": "apps", "kind": "Deployment", "namespace": "warden", "name": "warden"}],
        "reconciledAt": "2026-01-05T10:05:00Z",
        "sourceType": "Kustomize",
    }
    return app


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (`kubectl patch --type merge`): null removes a key, objects merge, the rest replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def written(old: Obj, patch: Obj, manager: str = "kubectl-patch") -> Obj:
    """The object validating admission sees for a merge patch: the patch applied, the server's metadata moved on."""
    new: Obj = merge_patch(old, patch)
    meta = new["metadata"]
    meta["resourceVersion"] = str(int(old["metadata"]["resourceVersion"]) + 1)
    if {k: v for k, v in new.items() if k != "metadata"} != {k: v for k, v in old.items() if k != "metadata"}:
        meta["generation"] = old["metadata"]["generation"] + 1  # no status subresource: any change but metadata's
    meta["managedFields"] = [*meta["managedFields"], {"manager": manager, "operation": "Update"}]
    return new


def request(operation: str, app: Obj, username: str, groups: tuple[str, ...]) -> Request:
    meta = app["metadata"]
    return Request(
        operation,
        "argoproj.io",
        "v1alpha1",
        "applications",
        "Application",
        meta["namespace"],
        meta["name"],
        username=username,
        groups=groups,
    )
