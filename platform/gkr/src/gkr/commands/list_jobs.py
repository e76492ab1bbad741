"""`gkr list`: the team's jobs and clusters in a region."""

from __future__ import annotations

from rich.table import Table

from contract.names import TEAM_LABEL
from gkr import kube, views
from gkr.commands.common import (
    Context,
    Output,
    Region,
    RegistryPath,
    Team,
    api_errors,
    console,
    print_objects,
    target,
    typer_command,
)


def list_jobs(
    team: Team = None,
    region: Region = None,
    registry: RegistryPath = None,
    context: Context = None,
    output: Output = "table",
) -> None:
    """The team's jobs and clusters in a region."""
    api, namespace, _ = target(registry, team, region, context)
    with api_errors("listing jobs"):
        rows = [(kind, item) for kind in kube.KINDS for item in kube.list_jobs(api, namespace, kind, TEAM_LABEL)]
    if output in ("yaml", "json"):
        print_objects([item for _, item in rows], output)
        return
    table = Table("kind", "name", "status", "queue", "run (* home)")
    for kind, item in rows:
        table.add_row(*views.job_row(kind, item))
    console().print(table)
    if any(views.run_cell(item) for _, item in rows):
        console().print(
            "a run spans regions: `gkr status NAME` shows every region's part, `gkr delete NAME` removes all"
        )


command = typer_command("list", list_jobs)
