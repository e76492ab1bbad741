"""The upstream releases each cluster's Argo CD installs, by the commit each release tag names.

fleet.yaml pins the versions (`versions.argocd`, `kuberay`, `kueue`); Argo CD syncs each from its
git repository at the full commit SHA written here, never at the tag: a tag can be moved to
other content, a commit cannot (argo-cd v3.5.1 docs/user-guide/tracking_strategies.md, "Tag
Tracking" and "Commit Pinning"). Helm charts are rendered from their folder in that commit
(Argo CD picks Helm for a path holding a Chart.yaml: docs/user-guide/tool_detection.md), so
no chart repository is read at sync time either.

Each commit was read from a snapshot of the upstream repository with
`git rev-parse v<version>^{commit}` (kueue's and kuberay's tags are annotated: the tag
object differs from the commit), and is the commit ../shared/crds/README.md records for the
CRDs copied from the same tag. To add a version: `git ls-remote --tags <repo> v<version>`
prints the commit (the `^{}` line for an annotated tag); never write one down unread.
Pure data: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from fleet.model import Fleet


@dataclass(frozen=True)
class Upstream:
    name: str  # as people say it, in messages
    field: str  # its version in fleet.yaml `versions`
    repo: str  # the git repository Argo CD clones
    commits: Mapping[str, str]  # version -> the commit its tag names (read-only)

    def tag(self, version: str) -> str:
        return f"v{version}"


def _commits(table: dict[str, str]) -> Mapping[str, str]:
    return MappingProxyType(table)


ARGOCD = Upstream(
    "Argo CD",
    "argocd",
    "https://github.com/argoproj/argo-cd.git",
    _commits({"3.5.1": "109ca7ca71139e514114499d294a492e7910a965"}),  # tag v3.5.1 (lightweight)
)
KUBERAY = Upstream(
    "KubeRay",
    "kuberay",
    "https://github.com/ray-project/kuberay.git",
    _commits({"1.7.0": "59d663aeec13760646da3db9c1cf8cfe883e30b7"}),  # tag v1.7.0 (annotated, object 9c13e713)
)
KUEUE = Upstream(
    "Kueue",
    "kueue",
    "https://github.com/kubernetes-sigs/kueue.git",
    _commits({"0.19.2": "8eab68778fc1b52affe165fdf5af29d1e9b4f3cb"}),  # tag v0.19.2 (annotated, object c3785e52)
)
UPSTREAMS = (ARGOCD, KUBERAY, KUEUE)


class UnknownRelease(ValueError):
    """fleet.yaml pins a version whose commit is not in the table (fleet.rules reports it as one line)."""


def version(upstream: Upstream, fleet: Fleet) -> str:
    return str(getattr(fleet.versions, upstream.field))


def commit(upstream: Upstream, fleet: Fleet) -> str:
    """The commit the pinned version's release tag names; raises UnknownRelease when it is not written down."""
    pinned = version(upstream, fleet)
    found = upstream.commits.get(pinned)
    if found is None:
        raise UnknownRelease(f"{upstream.name} {pinned}: {missing(upstream, pinned)}")
    return found


def missing(upstream: Upstream, pinned: str) -> str:
    """Why `pinned` cannot be synced (to follow "<name> <version>: ")."""
    tag = upstream.tag(pinned)
    return (
        f"the commit its tag {tag} names is not in fleet.upstream.{upstream.field.upper()}; "
        f"add it as `git ls-remote --tags {upstream.repo} {tag}` prints it (the `^{{}}` line of an annotated tag) "
        f"(known: {', '.join(sorted(upstream.commits))})"
    )
