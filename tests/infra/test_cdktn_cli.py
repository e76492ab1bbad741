"""The real CDK Terrain CLI (pinned in infra/package-lock.json) synthesizes and lists the app."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.scenario  # the CDK Terrain CLI synthesizes the whole fleet

BIN = Path(sys.executable).parent


def _cdktn(*args: str, out: Path) -> subprocess.CompletedProcess[str]:
    # Only the project's own tools: no terraform, no system node.
    env = {**os.environ, "PATH": f"{BIN}:/usr/bin:/bin", "CHECKPOINT_DISABLE": "1", "CI": "1"}
    return subprocess.run(
        [BIN / "cdktn", *args, "--output", str(out)],
        cwd=REPO / "infra",
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_cdktn_synth_and_list(tmp_path: Path) -> None:
    synth = _cdktn("synth", out=tmp_path / "out")
    assert synth.returncode == 0, synth.stdout + synth.stderr
    stacks = sorted(p.name for p in (tmp_path / "out" / "stacks").iterdir())
    assert stacks == ["europe-west1", "global", "us-central1", "us-east4"]
    listed = _cdktn("list", out=tmp_path / "out")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines() if line.strip()][-4:] == [
        "europe-west1",
        "global",
        "us-central1",
        "us-east4",
    ]
