"""`gkr status`: one job's status as the cluster reports it; for a run across regions, every region's part."""

from __future__ import annotations

import typer

from gkr import kube, launch, lighthouse, views
from gkr.commands import common, options


def status(ctx: typer.Context, name: str, kind: options.Kind = "rayjob", output: options.Output = "yaml") -> None:
    """One job's status, as the cluster reports it."""
    at = options.where(ctx)
    api, namespace = common.job_target(kind, at)
    with common.api_errors(f"reading {kind} {name}"):
        found = kube.get_job(api, namespace, kind, name)
    run = lighthouse.run_of(found)
    if run is None:
        common.print_objects([found.get("status", {})], output)
        return
    run_id, regions, home = run
    apis, why = common.run_clients(at.registry, regions)
    parts = {**launch.find(apis, namespace, run_id, home), **why}
    common.print_objects([views.run_status(run_id, home, {r: parts[r] for r in regions})], output)


command = options.typer_command("status", status, options.where_options())
