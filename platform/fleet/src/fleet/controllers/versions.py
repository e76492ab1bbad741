"""The version of each upstream release whose sources the fleet's rules and models were read from.

A rule about Kueue or KubeRay (fleet.controllers), the pause of Argo CD's automated sync the runbooks rely on
(fleet.gitops.argocd.PAUSE_POINTER) and Ray's health-check timings in the node-loss model
(fleet.goodput.costs) are true of the release they were read at; each citation says where
(fleet.controllers.sources). fleet.yaml pins the versions Argo CD installs (`versions.kueue`, `kuberay`,
`argocd`), contract.names.RAY_VERSION the Ray every image runs; when either pins another, what was read may
no longer hold, so `meridian plan`, `generate` and `goodput` refuse it (fleet.rules) until the sources are
read again at the new tag. Bumping READ_AT alone would claim a reading that never happened: re-read each
cited source at the new tag (`git -C <mirror> show <tag>:<path> | grep -n <what>`), update the rules, their
tests and the citations' lines and versions (tests/controllers/test_sources.py holds them to READ_AT), then
READ_AT. Pure data: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

# release -> the version (MAJOR.MINOR.PATCH) whose sources were read.
READ_AT: Mapping[str, str] = MappingProxyType(
    {"kueue": "0.19.2", "kuberay": "1.7.0", "argocd": "3.5.1", "ray": "2.60.0"}
)
NAMES = MappingProxyType({"kueue": "Kueue", "kuberay": "KubeRay", "argocd": "Argo CD", "ray": "Ray"})
# What was read from each release, as the message names it.
_READ = {
    "kueue": "the rules in fleet.controllers were",
    "kuberay": "the rules in fleet.controllers were",
    "argocd": "the runbooks' pause of automated sync (fleet.gitops.argocd.PAUSE_POINTER) was",
    "ray": "the node-loss model's health-check timings (fleet.goodput.costs) were",
}


def tag(release: str, version: str) -> str:
    return f"ray-{version}" if release == "ray" else f"v{version}"


def unread(release: str, pinned: str) -> str | None:
    """Why what was read does not cover `pinned` of `release` (to follow "<name> <version>: "); None if it does."""
    read = READ_AT.get(release)
    if read is None or read == pinned:
        return None
    return (
        f"{_READ[release]} read at {NAMES[release]} {read}; re-read the sources they cite "
        f"at tag {tag(release, pinned)} and update them, their tests and fleet.controllers.sources, then READ_AT "
        "(never just bump it)"
    )
