"""The fleet registry gkr keeps per version of fleet.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.problem import Invalid
from fleet.load import load as load_fleet
from gkr import registry
from tests.conftest import SHIPPED


def test_round_trip_and_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    built = registry.from_fleet(load_fleet(SHIPPED))
    assert registry.from_json(registry.to_json(built)) == built
    first = registry.load(SHIPPED)
    (cached,) = (tmp_path / "gkr").glob("registry-*.json")
    assert first == built
    cached.write_text(registry.to_json(built).replace("meridian-train-prod", "from-the-cache"))
    assert registry.load(SHIPPED).project == "from-the-cache"  # the second call reads the cache


def test_a_changed_fleet_gets_a_new_entry_and_bad_specs_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SHIPPED.read_text())
    registry.load(spec)
    spec.write_text(SHIPPED.read_text().replace("nodes: 384", "nodes: 448", 1))
    assert registry.load(spec).regions[0].pools[0].nodes == 448
    assert len(list((tmp_path / "cache" / "gkr").glob("registry-*.json"))) == 2
    spec.write_text(SHIPPED.read_text().replace("priority: high", "priority: urgent"))
    with pytest.raises(Invalid, match="unknown priority 'urgent'"):
        registry.load(spec)


def test_registry_holds_what_gkr_needs() -> None:
    reg = registry.from_fleet(load_fleet(SHIPPED))
    central = reg.regions[0]
    assert reg.context(central) == "gke_meridian-train-prod_us-central1_meridian-us-central1"
    flex = central.pools[1]
    assert (flex.name, flex.flex_start, flex.nodes, flex.machine.gpu_model) == ("h200-flex", True, 128, "H200")
    assert flex.machine.preflight_many_nodes == ("--expect-gpus=8", "--min-tflops=600", "--min-busbw-gbps=256")


def test_registry_holds_priority_values_and_team_ceilings() -> None:
    reg = registry.from_fleet(load_fleet(SHIPPED))
    assert registry.FORMAT == "gkr.registry/v4"
    assert reg.priorities == {"critical": 100000, "high": 10000, "standard": 1000, "preemptible": 100}
    assert {t.name: (t.priority, t.ceiling) for t in reg.teams} == {
        "pretraining": ("high", "critical"),
        "research": ("standard", "high"),
        "evals": ("standard", "standard"),  # no max_priority: the default is the ceiling
    }
    assert registry.from_json(registry.to_json(reg)) == reg


def test_registry_v2_holds_cpu_pools_image_registry_and_datasets() -> None:
    reg = registry.from_fleet(load_fleet(SHIPPED))
    assert reg.image_registry == "us-docker.pkg.dev/meridian-train-prod/meridian"
    assert [(d.name, d.location) for d in reg.datasets] == [
        ("meridian-datasets-us", "US"),
        ("meridian-datasets-eu", "EU"),
    ]
    (cpu,) = reg.regions[0].cpu_pools
    assert (cpu.name, cpu.nodes, cpu.machine.name, cpu.machine.vcpus, cpu.machine.memory_gb) == (
        "cpu",
        64,
        "n2-standard-32",
        32,
        128,
    )
    assert cpu.machine.gpus == 0
