"""Every cluster's tree builds with real kustomize and validates; references resolve."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from fleet.gitops import argocd
from fleet.gitops.check import ClusterTree, check_tree, pinned
from fleet.gitops.tree import image_override
from fleet.gitops.validate import CrdSchemas, Finding, images, validate_object
from fleet.model import Fleet

Trees = dict[str, tuple[ClusterTree, list[Finding]]]
REGIONS = ["us-central1", "us-east4", "europe-west1"]
OUR_APPS = set(argocd.OVERLAY_APPS)


@pytest.mark.scenario
@pytest.mark.parametrize("region", REGIONS)
def test_cluster_builds_and_every_object_validates(fleet: Fleet, crds: CrdSchemas, trees: Trees, region: str) -> None:
    tree, findings = trees[region]
    spec = next(r for r in fleet.regions if r.name == region)
    findings = findings + check_tree(fleet, spec, tree, crds)
    assert [str(f) for f in findings] == []
    assert set(tree.apps) == OUR_APPS
    assert set(tree.upstream) == {"argocd", "kuberay-crds", "kuberay-operator", "kueue"}
    assert len(tree.objects()) > 60


def test_every_cluster_has_its_root(fleet: Fleet, trees: Trees) -> None:
    for region in fleet.regions:
        tree, _ = trees[region.name]
        root = next(o for o in tree.argocd if o["kind"] == "Application" and o["metadata"]["name"] == "root")
        assert root["spec"]["source"]["path"] == f"argocd/clusters/{fleet.cluster_name(region)}/apps"


def _first(tree: ClusterTree, kind: str) -> dict:  # type: ignore[type-arg]
    return next(o for _, o in tree.objects() if o["kind"] == kind)


def test_strict_schema_validation_rejects_unknown_and_wrong_fields(
    fleet: Fleet, crds: CrdSchemas, trees: Trees
) -> None:
    tree, _ = trees["us-central1"]
    queue = copy.deepcopy(_first(tree, "ClusterQueue"))
    queue["spec"]["cohort"] = "meridian"  # the v1beta1 name, gone in v1beta2
    assert any("'cohort' was unexpected" in p for p in validate_object(queue, "1.35", crds))
    deployment = copy.deepcopy(_first(tree, "Deployment"))
    deployment["spec"]["replicas"] = "two"
    assert any(p.startswith("spec.replicas:") for p in validate_object(deployment, "1.35", crds))
    daemonset = copy.deepcopy(_first(tree, "DaemonSet"))
    daemonset["spec"]["template"]["spec"]["nodeSelecter"] = {}
    assert validate_object(daemonset, "1.35", crds)


def test_a_missing_crd_schema_is_an_error_not_a_skip(fleet: Fleet, trees: Trees, tmp_path: Path) -> None:
    tree, _ = trees["us-central1"]
    nowhere = CrdSchemas({"kueue.x-k8s.io": "kueue/v9.9.9"}, [tmp_path])
    problems = validate_object(_first(tree, "ClusterQueue"), "1.35", nowhere)
    assert problems
    assert "no CRD schema for kueue.x-k8s.io/v1beta2 ClusterQueue" in problems[0]


_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
spec:
  group: example.com
  names: {kind: Widget}
  versions:
    - name: v1
      schema: {openAPIV3Schema: {type: object, properties: {spec: {type: %s}}}}
"""


def test_a_crd_file_is_parsed_once_per_process_until_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each `meridian generate` makes its own CrdSchemas: a process generating many trees (the review's scenarios)
    must not parse megabytes of the same pinned CRDs again each time, yet must see an edited file."""
    import yaml

    parsed: list[str] = []
    real = yaml.load

    def counted(text: str, Loader: Any) -> Any:
        parsed.append(text)
        return real(text, Loader=Loader)

    monkeypatch.setattr(yaml, "load", counted)
    crd = tmp_path / "widgets" / "example.com_widgets.yaml"
    crd.parent.mkdir()
    crd.write_text(_CRD % "object")

    def spec_type() -> object:
        return CrdSchemas({"example.com": "widgets"}, [tmp_path]).schema("example.com", "v1", "Widget")["properties"][
            "spec"
        ]["type"]

    assert [spec_type(), spec_type()] == ["object", "object"]
    assert len(parsed) == 1
    crd.write_text(_CRD % "integer")  # another size: read again
    assert spec_type() == "integer"
    assert len(parsed) == 2


@pytest.mark.scenario
def test_cross_checks_catch_broken_references(fleet: Fleet, crds: CrdSchemas, trees: Trees) -> None:
    tree, _ = trees["us-central1"]
    broken = copy.deepcopy(tree)
    local_queue = next(o for o in broken.apps["kueue-config"] if o["kind"] == "LocalQueue")
    local_queue["spec"]["clusterQueue"] = "nobody"
    deployment = next(o for o in broken.apps["warden"] if o["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["image"] = "warden:latest"
    deployment["spec"]["template"]["spec"]["serviceAccountName"] = "ghost"
    broken.apps["workloads"] = [copy.deepcopy(deployment)]  # the same object twice
    region = fleet.regions[0]
    messages = {f.message for f in check_tree(fleet, region, broken, crds)}
    assert "ClusterQueue nobody does not exist" in messages
    assert "image warden:latest is not pinned by a version tag or digest" in messages
    assert "service account warden/ghost does not exist" in messages
    assert "also defined by application warden" in messages or "also defined by application workloads" in messages


@pytest.mark.parametrize(
    ("reference", "entry"),
    [
        ("r.dev/p/img:v1.1.1", {"name": "x", "newName": "r.dev/p/img", "newTag": "v1.1.1"}),
        ("r.dev/p/img@sha256:" + "a" * 64, {"name": "x", "newName": "r.dev/p/img", "digest": "sha256:" + "a" * 64}),
        (
            "r.dev:443/p/img:1.0@sha256:" + "b" * 64,
            {"name": "x", "newName": "r.dev:443/p/img", "newTag": "1.0", "digest": "sha256:" + "b" * 64},
        ),
    ],
)
def test_image_overrides_pin_by_tag_digest_or_both(reference: str, entry: dict[str, str]) -> None:
    assert image_override("x", reference) == entry


def test_built_images_carry_the_spec_versions(fleet: Fleet, trees: Trees) -> None:
    tree, _ = trees["us-central1"]
    found = {image for _, o in tree.objects() for image in images(o)}
    v = fleet.versions
    assert {v.nccl_installer_image, v.warden_image, v.trainer_image} <= found
    assert all(pinned(image) for image in found)
    assert not [i for i in ("r.dev/p/img", "r.dev/p/img:latest", "r.dev:443/p/img") if pinned(i)]
