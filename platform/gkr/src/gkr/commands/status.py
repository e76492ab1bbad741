"""`gkr status`: one job's status as the cluster reports it; for a run across regions, every region's part."""

from __future__ import annotations

from gkr import kube, launch, lighthouse, views
from gkr.commands.common import (
    Context,
    Kind,
    Output,
    Region,
    RegistryPath,
    Team,
    api_errors,
    job_target,
    print_objects,
    run_clients,
    typer_command,
)


def status(
    name: str,
    kind: Kind = "rayjob",
    team: Team = None,
    region: Region = None,
    registry: RegistryPath = None,
    context: Context = None,
    output: Output = "yaml",
) -> None:
    """One job's status, as the cluster reports it."""
    api, namespace = job_target(kind, registry, team, region, context)
    with api_errors(f"reading {kind} {name}"):
        found = kube.get_job(api, namespace, kind, name)
    run = lighthouse.run_of(found)
    if run is None:
        print_objects([found.get("status", {})], output)
        return
    run_id, regions, home = run
    apis, why = run_clients(registry, regions)
    parts = {**launch.find(apis, namespace, run_id, home), **why}
    print_objects([views.run_status(run_id, home, {r: parts[r] for r in regions})], output)


command = typer_command("status", status)
