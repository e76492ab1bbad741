"""Shared fixtures: the repository root, the shipped fleet spec, spec editing helpers, and its one synthesis."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

if TYPE_CHECKING:
    from meridian_infra.report import Stacks

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "fleet.yaml"
SHIPPED_SPEC: dict[str, Any] = yaml.safe_load(SHIPPED.read_text())


@pytest.fixture
def spec() -> dict[str, Any]:
    """A fresh, editable copy of the shipped fleet spec as plain data."""
    return copy.deepcopy(SHIPPED_SPEC)


@pytest.fixture
def write_spec(tmp_path: Path) -> Callable[[dict[str, Any]], Path]:
    def write(data: dict[str, Any]) -> Path:
        path = tmp_path / "fleet.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return write


@pytest.fixture(scope="session")
def synth_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("infra") / "cdktf.out"


@pytest.fixture(scope="session")
def stacks(synth_dir: Path) -> Stacks:
    """The shipped fleet synthesized once per session (tests/infra, tests/review); read it, never edit it."""
    from meridian_infra.synth import synth  # imported here: most test folders never synthesize

    return synth(SHIPPED, synth_dir)
