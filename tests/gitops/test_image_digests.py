"""Once fleet.yaml pins a project image by digest, every object Argo CD applies names it by that digest."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from fleet.gitops.plan import built_trees
from fleet.load import load_text
from fleet.pins import pin_image
from tests.conftest import REPO, SHIPPED
from tests.gitops.conftest import KUBECTL

REGISTRY = "us-docker.pkg.dev/meridian-train-prod/meridian"
PINNED = {
    "warden_image": f"{REGISTRY}/warden:0.1.0@sha256:{'1' * 64}",  # a test's digests: no registry is reachable here
    "trainer_image": f"{REGISTRY}/trainer:0.1.0@sha256:{'2' * 64}",
}


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, str):
        yield value


def test_every_reference_to_a_project_image_carries_its_digest() -> None:
    text = SHIPPED.read_text()
    for field, image in PINNED.items():
        text = pin_image(text, field, image)
    loaded = load_text(text)
    # Containers, Warden's probation image in its ConfigMap, the registry gkr reads: everything derived.
    found: dict[str, int] = {}
    for tree, findings in built_trees(REPO, loaded, KUBECTL):
        assert findings == []
        for _, o in tree.objects():
            for string in _strings(o):
                for reference in re.findall(rf"{re.escape(REGISTRY)}/[a-z]+[^\s\"',\\]*", string):
                    name = reference.removeprefix(f"{REGISTRY}/").split(":", 1)[0].split("@", 1)[0]
                    assert reference == PINNED[f"{name}_image"], (tree.cluster, o["kind"], o["metadata"]["name"])
                    found[name] = found.get(name, 0) + 1
    assert set(found) == {"warden", "trainer"}
