"""The registry as typed JSON: what fleet writes, a reader gets back; anything else is one line, never a traceback."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from contract import registry
from contract.problem import Invalid
from fleet.load import load
from fleet.registry import registry_of
from tests.conftest import SHIPPED

SHIPPED_REGISTRY = registry_of(load(SHIPPED))
TEXT = registry.dumps(SHIPPED_REGISTRY)


def test_round_trip_is_exact() -> None:
    assert registry.loads(TEXT, "r.json") == SHIPPED_REGISTRY


def test_output_is_stable_and_versioned() -> None:
    assert registry.dumps(registry.loads(TEXT, "r.json")) == TEXT
    assert json.loads(TEXT)["schema"] == registry.SCHEMA


def test_thresholds_give_preflight_flags() -> None:
    machine = SHIPPED_REGISTRY.regions[0].pools[0].machine
    assert machine.preflight.args(1) == ("--expect-gpus=8", "--min-tflops=600", "--min-busbw-gbps=368")
    assert machine.preflight.args(4) == ("--expect-gpus=8", "--min-tflops=600", "--min-busbw-gbps=256")
    assert replace(machine.preflight, rdma=False).args(1)[-1] == "--no-rdma"
    assert replace(machine.preflight, gpus=0).args(1) == ("--no-rdma",)


def test_pool_quotas_add_up_to_the_team_quota() -> None:
    for team in SHIPPED_REGISTRY.teams:
        for region, gpus in team.quota.items():
            assert sum(team.pool_quota[region].values()) == gpus


def _edit(change: object) -> str:
    data = json.loads(TEXT)
    change(data)  # type: ignore[operator]
    return json.dumps(data)


HOSTILE = {
    "unknown field": (_edit(lambda d: d.update(admin=True)), "admin: unknown field"),
    "missing field": (_edit(lambda d: d.pop("project")), "project: missing"),
    "string for a number": (
        _edit(lambda d: d["regions"][0]["pools"][0].update(nodes="2")),
        "regions[0].pools[0].nodes: '2' is not an integer",
    ),
    "bool for a number": (
        _edit(lambda d: d["regions"][0]["pools"][0].update(nodes=True)),
        "regions[0].pools[0].nodes: True is not an integer",
    ),
    "other schema": (_edit(lambda d: d.update(schema="meridian.registry/v0")), "schema 'meridian.registry/v0'"),
    "not JSON": ("{", "not JSON"),
    "a list": ("[]", "expected a JSON object"),
    "deep nesting": ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    "huge": (" " * (9 << 20), "more than"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_documents_are_one_line(case: str) -> None:
    text, expected = HOSTILE[case]
    with pytest.raises(Invalid) as caught:
        registry.loads(text, "generated/registry.json")
    assert len(caught.value.lines) == 1
    line = caught.value.lines[0]
    assert line.startswith("generated/registry.json: ")
    assert expected in line
    assert "\n" not in line
