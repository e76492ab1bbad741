"""Kueue's feature gates: set as Meridian needs them, and nothing the manager refuses (fleet.controllers.gates)."""

from __future__ import annotations

import yaml

from fleet.controllers import gates
from tests.controllers.objects import GATES, values


def _rules(config_gates: dict[str, bool] | None, chart: list[dict[str, object]] | None = None) -> list[str]:
    chart_values = values(config_gates)
    config = yaml.safe_load(chart_values["managerConfig"]["controllerManagerConfigYaml"])
    if config_gates is None:
        del config["featureGates"]
    if chart is not None:
        chart_values["controllerManager"] = {"featureGates": chart}
    return [f.rule for f in gates.findings(config, chart_values)]


def test_every_gate_meridian_relies_on_must_be_written_down() -> None:
    assert _rules(GATES) == []
    assert _rules(None) == ["feature-gate"] * 5  # the defaults are not enough: they move between releases
    assert _rules({**GATES, "TASFailedNodeReplacementFailFast": True}) == ["feature-gate"]


def test_fail_fast_is_off_because_one_failed_search_evicts_the_gang() -> None:
    wanted, why = gates.RELIED_ON["TASFailedNodeReplacementFailFast"]
    assert wanted is False
    assert "evicts the whole gang" in why
    assert gates.DEFAULTS["TASFailedNodeReplacementFailFast"] is True  # 0.19's default: hence written down


def test_gates_in_both_places_stop_the_manager() -> None:
    chart = [{"name": g, "enabled": v} for g, v in GATES.items()]
    assert _rules(GATES, chart) == ["gate-conflict"]
    assert _rules(None, chart) == []  # the chart's flag alone is as good (Meridian uses the Configuration)
    assert _rules(None, []) == ["feature-gate"] * 5  # an empty list writes no flag


def test_dependencies_unknown_and_locked_gates_stop_the_manager() -> None:
    off = {**GATES, "TASFailedNodeReplacement": False}
    # FailFast and the 30 s NotReady trigger are off; the pod-termination trigger still needs TASFailedNodeReplacement.
    assert sorted(_rules(off)) == ["feature-gate", "gate-dependency"]
    not_ready = {**off, "TASReplaceNodeDueToNotReadyOverFixedTime": True}
    assert sorted(_rules(not_ready)) == ["feature-gate", "feature-gate", "gate-dependency", "gate-dependency"]
    assert _rules({**GATES, "TopologyAwareSchedulling": True}) == ["gate-unknown"]
    assert _rules({**GATES, "ManagedJobsNamespaceSelectorAlwaysRespected": False}) == ["gate-locked"]
