"""The twin's scenarios (marker `twin`, run by `make twin`): images built once per session by `meridian-twin build`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from twin import images
from twin.engine import TwinError, state_dir

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def built() -> set[str]:
    """The names of the twin images; `make twin` builds them first (an unchanged image is not rebuilt)."""
    names = {d.name for d in images.dockerfiles(REPO)}
    missing = [name for name in sorted(names) if not images.engine.image_exists(f"{images.REGISTRY}/{name}:twin")]
    if missing:
        raise TwinError(f"twin images not built: {', '.join(missing)}; run `meridian-twin build` (make twin does)")
    return names


@pytest.fixture
def scratch() -> Iterator[Path]:
    folder = state_dir() / "scenarios"
    folder.mkdir(parents=True, exist_ok=True)
    yield folder
