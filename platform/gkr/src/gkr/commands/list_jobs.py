"""`gkr list`: the team's jobs and clusters in a region."""

from __future__ import annotations

import typer
from rich.table import Table

from contract.names import TEAM_LABEL
from gkr import kube, views
from gkr.commands import common, options


def list_jobs(ctx: typer.Context, output: options.Output = "table") -> None:
    """The team's jobs and clusters in a region."""
    api, namespace, _ = common.target(options.where(ctx))
    with common.api_errors("listing jobs"):
        rows = [(kind, item) for kind in kube.KINDS for item in kube.list_jobs(api, namespace, kind, TEAM_LABEL)]
    if output in ("yaml", "json"):
        common.print_objects([item for _, item in rows], output)
        return
    table = Table("kind", "name", "status", "queue", "run (* home)")
    for kind, item in rows:
        table.add_row(*views.job_row(kind, item))
    common.console().print(table)
    if any(views.run_cell(item) for _, item in rows):
        common.console().print(
            "a run spans regions: `gkr status NAME` shows every region's part, `gkr delete NAME` removes all"
        )


command = options.typer_command("list", list_jobs, options.where_options())
