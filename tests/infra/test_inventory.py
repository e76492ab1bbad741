"""The synthesized stacks hold exactly what their written-down inventory says (tests/infra/inventory/).

One file per fleet, the shipped fleet.yaml and each example in platform/fleet/examples/: resources per
type per stack, every node pool's machine, size, locations, reservation and upgrade settings, every
firewall rule's ranges and ports, every subnet's ranges, every IAM grant. The expected values are the
committed files, never re-derived from the fleet: a change that alters a plan fails here until
`scripts/inventory.py --write` rewrites them, and the diff of that commit is what a reviewer reads.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from meridian_infra.report import Stacks
from tests.conftest import SHIPPED
from tests.inventory import INFRA, committed, difference, fleets, infra_file, name, stacks_text, synthesized

EXAMPLES = fleets()[1:]


def test_the_shipped_stacks_match_their_inventory(stacks: Stacks) -> None:
    problem = difference(infra_file(SHIPPED), stacks_text(SHIPPED, stacks))
    assert not problem, problem


@pytest.mark.parametrize("fleet", EXAMPLES, ids=[name(f) for f in EXAMPLES])
def test_each_example_fleets_stacks_match_their_inventory(fleet: Path) -> None:
    problem = difference(infra_file(fleet), stacks_text(fleet, synthesized(fleet)))  # one synthesis per example
    assert not problem, problem


def test_there_is_an_example_and_every_inventory_belongs_to_a_fleet() -> None:
    assert EXAMPLES, "platform/fleet/examples/ holds no example fleet"
    assert committed([INFRA]) == {infra_file(f) for f in fleets()}


def test_a_changed_pool_or_rule_shows_as_a_diff_naming_the_file(stacks: Stacks) -> None:
    changed = copy.deepcopy(stacks)
    region = changed["us-east4"]["resource"]
    region["google_container_node_pool"]["pool_h200-a"]["node_count"] = 383
    region["google_compute_firewall"]["fw_control_plane"]["source_ranges"].append("0.0.0.0/0")
    problem = difference(infra_file(SHIPPED), stacks_text(SHIPPED, changed))
    assert "-      node_count: 384\n+      node_count: 383\n" in problem
    assert "+      source_ranges: [10.24.176.0/28, 0.0.0.0/0]\n" in problem
    assert problem.startswith("--- tests/infra/inventory/fleet.yaml (committed)\n+++ now\n")
    assert problem.endswith("run `scripts/inventory.py --write` and commit the inventory with it")
