"""`gkr clusters`: regions, clusters, GPUs by type and each team's quota (with --live: what Kueue says)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.table import Table

from gkr import kube, views
from gkr.commands import common, options


def clusters(
    registry: options.RegistryPath = None,
    live: Annotated[bool, typer.Option("--live", help="ask each cluster's Kueue for GPUs in use and free")] = False,
    output: options.Output = "table",
) -> None:
    """Regions, their clusters, GPU types and each team's quota (with --live: free / nominal, from Kueue)."""
    _, found = common.located(registry)
    reg = found.registry
    rows = []
    for region in reg.regions:
        quota = views.nominal_quota(reg, region)
        if live:
            queues, why = kube.cluster_queues_or_why(reg.context(region), common.LIVE_TIMEOUT_S)
            quota = views.live_quota(list(quota), queues, why)
            if why:
                fix = f"; run: {reg.credentials_command(region)}" if why == "no context" else ""
                print(f"{region.name}: unreachable ({why}){fix}", file=sys.stderr)
        rows.append(views.capacity_row(region, quota))
    if output in ("yaml", "json"):
        common.print_objects(rows, output)
        return
    table = Table(*views.capacity_header(reg, live))
    for row in rows:
        table.add_row(*views.capacity_cells(row))
    common.console().print(table)


command = options.typer_command("clusters", clusters)
