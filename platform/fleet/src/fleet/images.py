"""Which images the fleet may run: the Binary Authorization allowlist, derived from the spec.

Every cluster enforces the project's Binary Authorization policy; its default rule
denies, so each image the fleet deploys must match a pattern here. Pure: no I/O.
"""

from __future__ import annotations

import re
from functools import cache

from fleet.model import Fleet

# GKE's pause image that container-engine-accelerators gpudirect-rdma/nccl-rdma-installer.yaml
# runs as the installer DaemonSet's container (tag and digest as written there).
GKE_PAUSE = "gke.gcr.io/pause:3.8@sha256:880e63f94b145e46f1b1082bb71b85e21f16b99b180b9996407d61240ceb9830"

# Upstream images of what Argo CD installs, by the component's version in fleet.yaml.
# (component, version field in `versions`, image template; `{v}` is that version)
UPSTREAM: tuple[tuple[str, str, str], ...] = (
    # kuberay-helm chart kuberay-operator values.yaml: image.repository quay.io/kuberay/operator, tag v<chart version>
    ("kuberay-operator", "kuberay", "quay.io/kuberay/operator:v{v}"),
    # Kueue's release: controller image registry.k8s.io/kueue/kueue:v<version> (kueue hack/helm-chart-package.sh, tag
    # v0.19.2, writes it into the released chart's values; the `kueue` application sets the same values, fleet.gitops.kueue)
    ("kueue", "kueue", "registry.k8s.io/kueue/kueue:v{v}"),
    # argo-cd manifests/base/kustomization.yaml (tag v3.5.1): every Argo CD component runs quay.io/argoproj/argocd:v<version>
    ("argocd", "argocd", "quay.io/argoproj/argocd:v{v}"),
)
# Images Argo CD's own install manifest (argo-cd v3.5.1 manifests/install.yaml, manifests/base/redis and
# manifests/base/dex) pins for its helpers; they move only with the Argo CD version, so they are keyed by it.
ARGOCD_HELPERS: dict[str, tuple[str, ...]] = {
    "3.5.1": ("public.ecr.aws/docker/library/redis:8.2.3-alpine", "ghcr.io/dexidp/dex:v2.45.0"),
}


def upstream_image(component: str, fleet: Fleet) -> str:
    """The image UPSTREAM names for `component` at the version fleet.yaml pins."""
    _, field, template = next(entry for entry in UPSTREAM if entry[0] == component)
    return template.format(v=getattr(fleet.versions, field))


class UnknownArgoCD(ValueError):
    """fleet.yaml pins an Argo CD version whose helper images are not in ARGOCD_HELPERS."""


def _repository(image: str) -> str:
    """`registry/path/name` of `registry/path/name:tag@digest` (a registry port is kept)."""
    without_digest = image.split("@", 1)[0]
    head, _, last = without_digest.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}"


def _pinned(image: str) -> list[str]:
    """The image as pinned, and the same version with any digest (a digest pins it further)."""
    version = image.split("@", 1)[0]
    return [version, f"{version}@*"] if image == version else [image, version, f"{version}@*"]


def allowlist(fleet: Fleet) -> list[str]:
    """Binary Authorization name patterns for every image the fleet deploys, sorted, unique."""
    v = fleet.versions
    patterns = [
        # The fleet's own registry: warden, trainer and whatever the image workflow pushes (one level deep).
        f"{fleet.registry.url(fleet.project.id)}/*",
        # Google's gIB installer: its repository, any version the spec pins.
        f"{_repository(v.nccl_installer_image)}:*",
        f"{_repository(v.nccl_installer_image)}@*",
        *_pinned(GKE_PAUSE),
    ]
    for component, _, _ in UPSTREAM:
        patterns += _pinned(upstream_image(component, fleet))
    helpers = ARGOCD_HELPERS.get(v.argocd)
    if helpers is None:
        raise UnknownArgoCD(
            f"versions.argocd {v.argocd}: its redis and dex images are unknown; add them to "
            "fleet.images.ARGOCD_HELPERS from that tag's manifests/install.yaml"
        )
    for image in helpers:
        patterns += _pinned(image)
    return sorted(set(patterns))


@cache
def _compile(pattern: str) -> re.Pattern[str]:
    """`**` matches across path segments, `*` within one (never a `/`); everything else is literal."""
    parts = re.split(r"(\*\*|\*)", pattern)
    body = "".join({"**": ".*", "*": "[^/]*"}.get(p, re.escape(p)) for p in parts)
    return re.compile(body, re.DOTALL)


def admitted(image: str, patterns: list[str]) -> bool:
    """Whether Binary Authorization's allowlist admits `image` (the whole reference must match a pattern)."""
    if not image or any(c.isspace() for c in image):
        return False  # not an image reference
    return any(_compile(p).fullmatch(image) for p in patterns)
