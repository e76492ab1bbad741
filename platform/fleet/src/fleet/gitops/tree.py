"""The whole generated tree, as {path relative to the repository: file text}.

The generator owns `kustomize/overlays/` and `argocd/clusters/` entirely;
`kustomize/base/` and the READMEs are written by hand.
"""

from __future__ import annotations

from typing import Any

from fleet import names
from fleet.gitops import admission, argocd
from fleet.gitops.kueue import kueue_objects
from fleet.gitops.networking import network_objects
from fleet.gitops.objects import dump, kustomization
from fleet.gitops.teams import team_objects
from fleet.gitops.warden import warden_objects
from fleet.model import Fleet, Region
from fleet.quotaplan import QuotaPlan

OWNED = ("kustomize/overlays", "argocd/clusters", "platform/gkr/src/gkr/schemas")
BASE = "../../../base"


def image_override(name: str, reference: str) -> dict[str, str]:
    """A kustomize `images:` entry that pins `name` to `reference`, by version tag, digest or both.

    kustomize writes `newName:newTag@digest` when both are given, `newName@digest` with a digest only.
    """
    repository, _, digest = reference.partition("@")
    tag = ""
    if ":" in repository.rsplit("/", 1)[-1]:
        repository, tag = repository.rsplit(":", 1)
    entry = {"name": name, "newName": repository}
    if tag:
        entry["newTag"] = tag
    if digest:
        entry["digest"] = digest
    return entry


def _overlay(fleet: Fleet, region: Region, quotas: QuotaPlan) -> dict[str, str]:
    v = fleet.versions
    files: dict[str, str] = {}

    def app(name: str, resources: list[str], objects: list[Any] | None = None, **fields: Any) -> None:
        path = argocd.overlay_path(fleet, region, name)
        if objects:
            files[f"{path}/{name}.yaml"] = dump(objects)
            resources = [*resources, f"{name}.yaml"]
        files[f"{path}/kustomization.yaml"] = kustomization(resources, **fields)

    app("teams", [], team_objects(fleet, region, quotas) + admission.team_policies(fleet, region))
    app(
        "gpu-networking",
        [f"{BASE}/gpu-networking"],
        network_objects(fleet, region),
        images=[image_override("nccl-installer", v.nccl_installer_image)],
    )
    app("kueue-config", [], kueue_objects(fleet, region, quotas))
    wi = {names.GCP_SERVICE_ACCOUNT_ANNOTATION: names.service_account_email(fleet, names.WARDEN_ROLE)}
    app(
        "warden",
        [f"{BASE}/warden"],
        warden_objects(fleet, region) + admission.agent_policies(),
        images=[image_override("warden", v.warden_image)],
        patches=[
            {
                "target": {"kind": "ServiceAccount", "name": names.WARDEN_KSA},
                "patch": dump(
                    [
                        {
                            "apiVersion": "v1",
                            "kind": "ServiceAccount",
                            "metadata": {"name": names.WARDEN_KSA, "annotations": wi},
                        }
                    ]
                ).split("\n", 1)[1],
            }
        ],
    )
    app("training-images", [f"{BASE}/image-prepull"], images=[image_override("trainer", v.trainer_image)])
    app("workloads", [f"{BASE}/workloads"])
    return files


def _argocd(fleet: Fleet, region: Region) -> dict[str, str]:
    apps = argocd.apps_path(fleet, region)
    cluster_dir = apps.rsplit("/", 1)[0]
    return {
        f"{cluster_dir}/root.yaml": dump(argocd.root(fleet, region)),
        f"{apps}/projects.yaml": dump(argocd.projects(fleet)),
        f"{apps}/applications.yaml": dump([argocd.application(a) for a in argocd.cluster_apps(fleet, region)]),
        f"{apps}/kustomization.yaml": kustomization(["projects.yaml", "applications.yaml"]),
    }


def render_tree(fleet: Fleet, quotas: QuotaPlan) -> dict[str, str]:
    files: dict[str, str] = {}
    for region in fleet.regions:
        files |= _overlay(fleet, region, quotas)
        files |= _argocd(fleet, region)
    return dict(sorted(files.items()))
