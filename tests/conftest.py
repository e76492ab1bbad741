"""Shared fixtures: the repository root, the shipped fleet spec, and spec editing helpers."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

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
