"""The twin's scenarios (marker `twin`, run by `make twin` after `meridian-twin build`): one node, its pods."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from safeyaml import load
from twin import devices, images
from twin.engine import TwinError, image_exists, state_dir
from twin.kubelet import Kubelet
from twin.spec import Objects
from twin.volumes import StandIns

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests/gkr/golden"


def golden(name: str) -> dict[str, Any]:
    """A gkr example's rendered object (tests/gkr/test_golden.py holds it equal to `gkr submit --dry-run`)."""
    doc = load((GOLDEN / f"{name}.yaml").read_text())
    assert isinstance(doc, dict)
    return doc


@pytest.fixture(scope="session")
def built() -> set[str]:
    """The names of the twin images; `make twin` builds them first (an unchanged image is not rebuilt)."""
    names = {d.name for d in images.dockerfiles(REPO)}
    missing = [name for name in sorted(names) if not image_exists(f"{images.REGISTRY}/{name}:twin")]
    if missing:
        raise TwinError(f"twin images not built: {', '.join(missing)}; run `meridian-twin build` (make twin does)")
    return names


@pytest.fixture
def kubelet(built: set[str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubelet]:
    """A twin node with the device stand-ins; every pod, container and namespace it made is gone after the test."""
    root = state_dir() / "scenarios"
    host = devices.host_paths(root / "host")
    stand_ins = StandIns({path: str(folder) for path, folder in host.items()}, str(tmp_path_factory.mktemp("buckets")))
    node = Kubelet(root / "pods", lambda ref: images.image_name(ref, built) or ref, Objects(), stand_ins)
    try:
        yield node
    finally:
        node.close()
