"""Run gkr in-process, with the shipped fleet and no user config."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from gkr.cli import app
from tests.conftest import SHIPPED

EXAMPLES = Path(__file__).resolve().parents[2] / "platform" / "gkr" / "examples"
GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture
def gkr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # no user config
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # a registry cache of its own
    monkeypatch.delenv("GKR_FLEET", raising=False)

    def run(*args: str) -> Result:
        return CliRunner().invoke(
            app, [*args[:1], "--fleet", str(SHIPPED), *args[1:]] if args and args[0] != "--help" else list(args)
        )

    return run
