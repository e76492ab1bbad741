"""`meridian plan` (what `make plan` runs) prints the fleet summary."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fleet.cli import main
from tests.conftest import REPO, SHIPPED


def test_plan_prints_regions_pools_capacity_and_ranges(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--fleet", str(SHIPPED)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "Fleet meridian (project meridian-train-prod): 3 regions, 5 GPU pools, 1,280 GPU nodes, 10,240 GPUs"
    )
    pool_rows = [line.split() for line in out.splitlines() if " a3-ultragpu-8g " in line]
    assert [row[:6] for row in pool_rows][:2] == [
        ["us-central1", "h200-a", "us-central1-b", "a3-ultragpu-8g", "384", "3,072"],
        ["us-central1", "h200-flex", "us-central1-b", "a3-ultragpu-8g", "128", "1,024"],
    ]
    assert "reservation meridian-usc1-h200-a block meridian-usc1-h200-a-block-0001" in out
    assert "flex-start (queued)" in out
    assert "us-central1   10.8.128.0/20   10.0.0.0/13   10.8.144.0/20   10.8.160.0/20   10.8.176.0/28" in out
    assert "rdma us-central1-b: 10.8.32.0/22 .. 10.8.60.0/22 (8 x /22)" in out


def test_plan_json_is_machine_readable(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--fleet", str(SHIPPED), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["capacity"]["gpus"] == 10_240
    assert [r["name"] for r in data["regions"]] == ["us-central1", "us-east4", "europe-west1"]
    assert data["regions"][2]["gpu_pools"][0]["team"] == "pretraining"
    assert len(data["regions"][0]["rdma"]["us-central1-b"]) == 8
    # Each team namespace's object counts (fleet.objectquota), which the plan review holds the ResourceQuotas to.
    assert data["regions"][0]["objects"]["research"]["services"] == (4096 - 2 - 256) // 3


def test_explicit_ranges_are_marked(
    spec: dict[str, Any], write_spec: Callable[[dict[str, Any]], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    spec["regions"][0]["network"] = {"services": "172.16.0.0/20"}
    assert main(["plan", "--fleet", str(write_spec(spec))]) == 0
    assert "172.16.0.0/20*" in capsys.readouterr().out


def _make_plan(fleet: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "-s", "plan", f"FLEET={fleet}", f"SYNTH_OUT={out}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.scenario
def test_make_plan_takes_another_spec(
    spec: dict[str, Any], write_spec: Callable[[dict[str, Any]], Path], tmp_path: Path
) -> None:
    spec["regions"] = spec["regions"][:1]
    spec["teams"] = [{**t, "quota": {"us-central1": t["quota"]["us-central1"]}} for t in spec["teams"]]
    out = tmp_path / "cdktf.out"
    result = _make_plan(write_spec(spec), out)
    assert result.returncode == 0, result.stderr
    assert "1 regions, 2 GPU pools, 512 GPU nodes, 4,096 GPUs" in result.stdout
    assert "us-central1: 30 resources, 512 GPU nodes, 4,096 GPUs" in result.stdout
    assert sorted(p.name for p in (out / "stacks").iterdir()) == ["global", "us-central1"]


@pytest.mark.scenario
def test_make_plan_stops_at_an_invalid_spec(
    spec: dict[str, Any], write_spec: Callable[[dict[str, Any]], Path], tmp_path: Path
) -> None:
    spec["teams"][0]["priority"] = "urgent"
    out = tmp_path / "cdktf.out"
    result = _make_plan(write_spec(spec), out)
    assert result.returncode != 0
    assert "teams[0].priority: unknown priority 'urgent'" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()
