"""checkov over every synthesized stack: zero failures beyond the skips in infra/checkov.yaml."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from meridian_infra.report import Stacks
from tests.conftest import REPO

CONFIG = REPO / "infra" / "checkov.yaml"
CHECKOV = Path(sys.executable).parent / "checkov"


def test_every_skip_has_a_reason() -> None:
    skips = [line for line in CONFIG.read_text().splitlines() if re.match(r"\s+- CKV", line)]
    assert skips
    for line in skips:
        check, _, reason = line.strip().removeprefix("- ").partition("#")
        assert re.fullmatch(r"CKV2?_GCP_\d+", check.strip()), line
        assert len(reason.strip()) > 20, f"{check.strip()} needs a one-line reason"


@pytest.mark.scenario
def test_checkov_passes_on_every_stack(synth_dir: Path, stacks: Stacks) -> None:
    result = subprocess.run(
        [CHECKOV, "--config-file", CONFIG, "-d", synth_dir / "stacks", "-o", "json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    reports = json.loads(result.stdout)
    summary = (reports if isinstance(reports, dict) else reports[0])["summary"]
    assert summary["failed"] == 0
    assert summary["passed"] > 100  # the scan really read the stacks
