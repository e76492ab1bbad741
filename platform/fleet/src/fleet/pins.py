"""Pin an image's digest in fleet.yaml, keeping every other byte of the file.

The image workflow (.github/workflows/images.yaml) builds the platform images,
pushes them and resolves the third-party ones; it proposes each digest through
`meridian pin-image FIELD IMAGE@sha256:...`, which edits the one line of
`versions.FIELD` and refuses anything the spec would not accept.
"""

from __future__ import annotations

import re

from contract.problem import Invalid
from fleet.load import load_text

PINNABLE = ("warden_image", "trainer_image", "nccl_installer_image")
_DIGEST = re.compile(r"[^@\s]+@sha256:[0-9a-f]{64}")


def pin_image(text: str, field: str, image: str, name: str = "fleet.yaml") -> str:
    """The spec text with versions.FIELD set to IMAGE (which must carry a digest); raises Invalid."""
    if field not in PINNABLE:
        raise Invalid([f"{name}: versions.{field}: not an image field; use one of {', '.join(PINNABLE)}"])
    if not _DIGEST.fullmatch(image):
        raise Invalid([f"{name}: versions.{field}: {image!r} has no digest; pass REPOSITORY:VERSION@sha256:<64 hex>"])
    line = re.compile(rf"^(\s+{field}:[ \t]*)(\S+)(.*)$", re.MULTILINE)
    found = list(line.finditer(text))
    if len(found) != 1:
        raise Invalid([f"{name}: versions.{field}: found {len(found)} lines for it; expected exactly one"])
    match = found[0]
    updated = text[: match.start(2)] + image + text[match.end(2) :]
    load_text(updated, name)  # the result must still be a valid spec
    return updated
