"""Monitoring generated from the fleet: GMP scrape objects and alert rules per cluster, Grafana dashboards.

scrape.py (what is scraped), rules.py (alerts with runbooks), dashboards.py (grafana-foundation-sdk),
queries.py (every query parses and selects only known metrics), upstream.py (the upstream exporters' names).
"""

from __future__ import annotations

from fleet.gitops.monitoring.rules import cluster_rules
from fleet.gitops.monitoring.scrape import scrape_objects
from fleet.gitops.objects import Obj


def monitoring_objects(docs: str) -> list[Obj]:
    """The `monitoring` application's objects; the same in every cluster (GMP labels each series with it).

    `docs`: the base URL of the runbooks' repository (rules.docs_url)."""
    return [*scrape_objects(), cluster_rules(docs)]
