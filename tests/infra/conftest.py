"""Synthesize the shipped fleet once per test session; tests read the Terraform JSON."""

from __future__ import annotations

from pathlib import Path

import pytest

from meridian_infra.report import Stacks
from meridian_infra.synth import synth
from tests.conftest import SHIPPED


@pytest.fixture(scope="session")
def synth_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("infra") / "cdktf.out"


@pytest.fixture(scope="session")
def stacks(synth_dir: Path) -> Stacks:
    return synth(SHIPPED, synth_dir)
