"""The version of each controller whose sources the rules in fleet.controllers were read from.

A rule about Kueue or KubeRay is true of the release it was read at. fleet.yaml pins the versions Argo CD
installs (`versions.kueue`, `versions.kuberay`); when it pins another, the rules may no longer hold, so
`meridian plan` and `meridian generate` refuse it (fleet.rules) until the rules are read again at the new
tag. Bumping READ_AT alone would claim a reading that never happened: re-read each cited source at the new
tag (`git -C <mirror> grep -n <function> v<new>`), update the rules and their tests, then READ_AT.

Argo CD is not here: no rule in fleet.controllers reads it yet. Pure data: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

# versions field -> the release (MAJOR.MINOR.PATCH) whose sources the rules cite.
READ_AT: Mapping[str, str] = MappingProxyType({"kueue": "0.19.2", "kuberay": "1.7.0"})
_NAMES = {"kueue": "Kueue", "kuberay": "KubeRay"}


def unread(field: str, pinned: str) -> str | None:
    """Why the rules do not cover `pinned` for `versions.<field>` (to follow "<name> <version>: "); None if they do."""
    read = READ_AT.get(field)
    if read is None or read == pinned:
        return None
    return (
        f"the rules in fleet.controllers were read at {_NAMES[field]} {read}; re-read the sources they cite "
        f"at tag v{pinned} and update fleet/controllers and its tests, then READ_AT (never just bump it)"
    )
