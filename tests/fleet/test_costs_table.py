"""The fleet README's costs table is the model's (fleet.goodput.costs_table), as the metric tables are the catalogs'."""

from __future__ import annotations

from fleet.goodput.costs import Costs
from fleet.goodput.costs_table import table
from tests.conftest import REPO


def test_the_readme_shows_the_models_costs() -> None:
    assert table(Costs()) in (REPO / "platform/fleet/README.md").read_text(encoding="utf-8")


def test_the_host_reports_wait_is_warden_s() -> None:
    assert "| faulty-host report's operation, before a replace | 720 s |" in table(Costs())
