"""Synthesis as users run it: isolation between regions, backends, bad input, the report."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from meridian_infra.report import Stacks
from meridian_infra.synth import main, synth
from tests.conftest import SHIPPED


def _files(outdir: Path) -> dict[str, bytes]:
    return {p.parent.name: p.read_bytes() for p in sorted((outdir / "stacks").glob("*/cdk.tf.json"))}


def test_changing_one_region_changes_only_its_stack(
    synth_dir: Path, stacks: Stacks, spec: dict[str, Any], write_spec: Callable[[dict[str, Any]], Path], tmp_path: Path
) -> None:
    before = _files(synth_dir)
    spec["regions"][2]["gpu_pools"][1]["nodes"] = 192
    spec["regions"][2]["cluster"]["maintenance_window"]["start_utc"] = "02:00"
    synth(write_spec(spec), tmp_path / "out")
    after = _files(tmp_path / "out")
    changed = sorted(name for name in before if before[name] != after[name])
    assert changed == ["europe-west1"]


def test_adding_a_region_adds_a_stack_and_only_opens_the_others_to_its_pods(
    synth_dir: Path, stacks: Stacks, spec: dict[str, Any], write_spec: Callable[[dict[str, Any]], Path], tmp_path: Path
) -> None:
    before = _files(synth_dir)
    region = copy.deepcopy(spec["regions"][0])
    region.update(name="asia-south1", zones=["asia-south1-a", "asia-south1-b"])
    region["gpu_pools"] = [
        {
            "name": "h200-a",
            "machine_type": "a3-ultragpu-8g",
            "zone": "asia-south1-b",
            "nodes": 16,
            "capacity": {"mode": "spot"},
        }
    ]
    spec["regions"].append(region)
    stacks_after = synth(write_spec(spec), tmp_path / "out")
    after = _files(tmp_path / "out")
    assert set(after) - set(before) == {"asia-south1"}
    assert after["global"] == before["global"]
    # Every other region now admits the new region's pods for runs across regions: its two
    # cross-region rules gain one source, and nothing else of it changes.
    new_pods = stacks_after["asia-south1"]["resource"]["google_compute_subnetwork"]["subnet"]["secondary_ip_range"][0]
    for name in ("us-central1", "us-east4", "europe-west1"):
        old, new = stacks[name], copy.deepcopy(stacks_after[name])
        for rule in ("fw_cross_region", "fw_lighthouse"):
            sources = new["resource"]["google_compute_firewall"][rule]["source_ranges"]
            assert sources.pop() == new_pods["ip_cidr_range"]
        assert new == old, name


def test_local_backend_for_offline_plans(
    spec: dict[str, Any], write_spec: Callable[[dict[str, Any]], Path], tmp_path: Path
) -> None:
    stacks = synth(write_spec(spec), tmp_path / "out", backend="local")
    assert stacks["global"]["terraform"]["backend"] == {"local": {"path": "../../../.state/global.tfstate"}}
    remote = stacks["us-east4"]["data"]["terraform_remote_state"]["global_state"]
    assert remote == {"backend": "local", "config": {"path": "../../../.state/global.tfstate"}}


def test_invalid_spec_writes_nothing(
    spec: dict[str, Any],
    write_spec: Callable[[dict[str, Any]], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "marker").write_text("previous synth")
    spec["regions"][0]["gpu_pools"][0]["machine_type"] = "a3-ultragpu-9g"
    assert main(["--fleet", str(write_spec(spec)), "--outdir", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert "regions[0].gpu_pools[0].machine_type: unknown machine type" in err[0]
    assert [p.name for p in out.iterdir()] == ["marker"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.yaml", "out"]  # no staging folder left behind


def test_report_lists_every_stack_with_its_gpus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--fleet", str(SHIPPED), "--outdir", str(tmp_path / "out")]) == 0
    lines = capsys.readouterr().out.splitlines()
    heads = [line for line in lines if not line.startswith(" ")][1:]
    assert heads == [
        "global: 37 resources",  # an account per team, each reading the datasets
        "us-central1: 32 resources, 512 GPU nodes, 4,096 GPUs (4,096 x nvidia-h200-141gb)",
        "us-east4: 31 resources, 384 GPU nodes, 3,072 GPUs (3,072 x nvidia-h200-141gb)",
        "europe-west1: 32 resources, 384 GPU nodes, 3,072 GPUs (3,072 x nvidia-h200-141gb)",
    ]
    assert "google_container_node_pool 4" in lines[lines.index(heads[1]) + 1]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert set(manifest["stacks"]) == {"global", "us-central1", "us-east4", "europe-west1"}


def test_typed_bindings_reject_a_misspelled_attribute() -> None:
    from cdktn_provider_google.container_node_pool import ContainerNodePoolNodeConfig

    with pytest.raises(TypeError, match="machine_typ"):
        ContainerNodePoolNodeConfig(machine_typ="a3-ultragpu-8g")  # type: ignore[call-arg]


def test_synthesis_is_byte_for_byte_reproducible(stacks: Stacks, synth_dir: Path, tmp_path: Path) -> None:
    # The deploy compares a fresh synthesis with the digest the review recorded (review.deploy): a run that
    # differed by a timestamp, an absolute path or dict order would refuse every reviewed stack.
    again = tmp_path / "again"
    synth(SHIPPED, again)
    files = sorted(p.relative_to(synth_dir) for p in synth_dir.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    assert [f for f in files if (synth_dir / f).read_bytes() != (again / f).read_bytes()] == []
