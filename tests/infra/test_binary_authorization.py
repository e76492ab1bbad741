"""Binary Authorization: the API is on, the policy denies by default and admits every image the fleet deploys."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from fleet.images import ARGOCD_HELPERS, admitted, allowlist
from fleet.load import load
from fleet.rules import check
from meridian_infra.report import Stacks
from tests.conftest import REPO, SHIPPED

FLEET = load(SHIPPED).fleet
DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("image", "pattern", "expected"),
    [
        ("gcr.io/p/nginx:1.0", "gcr.io/p/*", True),
        ("gcr.io/p/nginx@" + DIGEST, "gcr.io/p/*", True),
        ("gcr.io/p/sub/nginx:1.0", "gcr.io/p/*", False),  # `*` stays within one segment
        ("gcr.io/p/sub/nginx:1.0", "gcr.io/p/**", True),  # `**` crosses segments
        ("gcr.io/p/nginx:1.0", "gcr.io/p/nginx*", True),
        ("gcr.io/p/nginx/image:1.0", "gcr.io/p/nginx*", False),
        ("gcr.io/p/nginx/image:1.0", "gcr.io/p/nginx**", True),
        ("gcr.io/p/nginx:1.0", "gcr.io/p/nginx:1.0", True),
        ("gcr.io/p/nginx:1.01", "gcr.io/p/nginx:1.0", False),  # the whole reference must match
        ("gcr.io/p/nginx:1.0", "gcr.io/p/nginx:1.0@*", False),
        ("gcr.io/p/nginx:1.0@" + DIGEST, "gcr.io/p/nginx:1.0@*", True),
        ("gcrXio/p/nginx:1.0", "gcr.io/p/*", False),  # `.` is literal, not a regex
        ("evil.io/gcr.io/p/nginx:1.0", "gcr.io/p/*", False),  # anchored at the start
        ("gcr.io/p/nginx:1.0\n", "gcr.io/p/*", False),
        ("gcr.io/p/a+b:1", "gcr.io/p/a+b:1", True),
    ],
)
def test_name_pattern_semantics(image: str, pattern: str, expected: bool) -> None:
    assert admitted(image, [pattern]) is expected


def test_allowlist_is_pinned_and_derived_from_the_spec() -> None:
    patterns = allowlist(FLEET)
    assert patterns == sorted(set(patterns))
    v = FLEET.versions
    assert "us-docker.pkg.dev/meridian-train-prod/meridian/*" in patterns
    assert f"quay.io/kuberay/operator:v{v.kuberay}" in patterns
    assert f"registry.k8s.io/kueue/kueue:v{v.kueue}" in patterns
    assert f"quay.io/argoproj/argocd:v{v.argocd}" in patterns
    assert set(ARGOCD_HELPERS[v.argocd]) <= set(patterns)
    # No pattern admits a whole registry outside the fleet's own repository.
    assert not [p for p in patterns if p.endswith("**")]
    assert not admitted("quay.io/kuberay/operator:v1.6.0", patterns)  # another version is not admitted
    assert not admitted("quay.io/argoproj/argocd:latest", patterns)


def test_an_unknown_argocd_version_is_one_clear_problem() -> None:
    fleet = FLEET.model_copy(update={"versions": FLEET.versions.model_copy(update={"argocd": "9.9.9"})})
    (problem,) = [p for p in check(fleet) if p.path == ("versions", "argocd")]
    assert "ARGOCD_HELPERS" in problem.message


def _policy(stacks: Stacks) -> dict[str, Any]:
    (policy,) = stacks["global"]["resource"]["google_binary_authorization_policy"].values()
    return dict(policy)


def test_policy_denies_by_default_and_the_api_is_enabled(stacks: Stacks) -> None:
    policy = _policy(stacks)
    assert policy["default_admission_rule"] == {
        "evaluation_mode": "ALWAYS_DENY",
        "enforcement_mode": "ENFORCED_BLOCK_AND_AUDIT_LOG",
    }
    assert policy["global_policy_evaluation_mode"] == "ENABLE"
    services = stacks["global"]["resource"]["google_project_service"]
    assert services["service_binaryauthorization"]["service"] == "binaryauthorization.googleapis.com"
    assert policy["depends_on"] == ["google_project_service.service_binaryauthorization"]
    for region in FLEET.regions:
        (cluster,) = stacks[region.name]["resource"]["google_container_cluster"].values()
        assert cluster["binary_authorization"] == {"evaluation_mode": "PROJECT_SINGLETON_POLICY_ENFORCE"}


def _containers(doc: Any) -> Iterator[str]:
    """Every `image:` anywhere in a manifest: containers, initContainers, and images Warden
    launches itself (its config's `probation.image`)."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key == "image" and isinstance(value, str):
                yield value
            elif doc.get("kind") == "ConfigMap" and key == "data" and isinstance(value, dict):
                for text in value.values():  # embedded YAML configs
                    yield from _containers(yaml.safe_load(text))
            else:
                yield from _containers(value)
    elif isinstance(doc, list):
        for item in doc:
            yield from _containers(item)


def _kustomize_images(doc: Any) -> Iterator[tuple[str, str]]:
    """(placeholder name, the reference kustomize writes) of a kustomization's `images:`."""
    for entry in doc.get("images", []) if isinstance(doc, dict) else []:
        ref = entry.get("newName", entry["name"])
        if entry.get("newTag"):
            ref += f":{entry['newTag']}"
        if entry.get("digest"):
            ref += f"@{entry['digest']}"
        yield entry["name"], ref


def deployed_images() -> set[str]:
    """Images in the committed overlays and base, with kustomize `images:` replacing their placeholders."""
    found: set[str] = set()
    placeholders: set[str] = set()
    for path in sorted(
        [*(REPO / "kustomize" / "overlays").rglob("*.yaml"), *(REPO / "kustomize" / "base").rglob("*.yaml")]
    ):
        for doc in yaml.safe_load_all(path.read_text()):
            if path.name == "kustomization.yaml":
                for name, ref in _kustomize_images(doc):
                    placeholders.add(name)
                    found.add(ref)
            else:
                found.update(_containers(doc))
    return found - placeholders  # a base placeholder is replaced by its overlay's `images:` entry


def _unpinned(image: str) -> bool:
    """No tag and no digest: the node pulls `latest`."""
    return "@" not in image and ":" not in image.rpartition("/")[2]


def test_every_pinned_and_deployed_image_is_admitted(stacks: Stacks) -> None:
    patterns = [p["name_pattern"] for p in _policy(stacks)["admission_whitelist_patterns"]]
    assert patterns == allowlist(FLEET)
    v = FLEET.versions
    pinned = {v.warden_image, v.trainer_image, v.nccl_installer_image}
    found = deployed_images()
    assert len(found) >= 4  # warden, trainer (also Warden's probation image), gIB installer
    deployed = {i for i in found if not _unpinned(i)}  # unpinned ones: see the next test
    refused = sorted(i for i in pinned | deployed if not admitted(i, patterns))
    assert refused == []


def test_every_deployed_image_is_pinned_and_admitted(stacks: Stacks) -> None:
    patterns = [p["name_pattern"] for p in _policy(stacks)["admission_whitelist_patterns"]]
    deployed = deployed_images()
    assert sorted(i for i in deployed if _unpinned(i)) == []
    assert sorted(i for i in deployed if not admitted(i, patterns)) == []


@pytest.mark.parametrize(
    "image",
    [
        "docker.io/library/nginx:1.27",
        "us-docker.pkg.dev/other-project/meridian/warden:0.1.0",
        "us-docker.pkg.dev/meridian-train-prod/meridian/nested/warden:0.1.0",
        "quay.io/kuberay/operator:latest",
        "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/other-image:v1.1.1",
    ],
)
def test_images_from_elsewhere_are_denied(stacks: Stacks, image: str) -> None:
    patterns = [p["name_pattern"] for p in _policy(stacks)["admission_whitelist_patterns"]]
    assert not admitted(image, patterns)
