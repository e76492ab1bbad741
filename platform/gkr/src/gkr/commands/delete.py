"""`gkr delete`: a job or cluster and its pods; a RayJob that is part of a run across regions takes the run."""

from __future__ import annotations

import sys

import typer

from contract.problem import Exit
from gkr import kube, launch, lighthouse
from gkr.commands import common, options


def delete(ctx: typer.Context, name: str, kind: options.Kind = "rayjob") -> None:
    """Delete a job or cluster, and its pods."""
    at = options.where(ctx)
    api, namespace = common.job_target(kind, at)
    run = None
    if kind == "rayjob":  # a RayJob may be one region's part of a run: then the whole run goes
        with common.api_errors(f"reading {kind} {name}"):
            run = lighthouse.run_of(kube.get_job(api, namespace, kind, name))
    if run is not None:
        _delete_run(at.registry, namespace, run)
        return
    with common.api_errors(f"deleting {kind} {name}"):
        kube.delete_job(api, namespace, kind, name)
    print(f"deleted {kind} {name}", file=sys.stderr)


def _delete_run(registry: str | None, namespace: str, run: tuple[str, list[str], str]) -> None:
    """Every region's RayJob of the run and its Lighthouse; what could not be reached is named, exit 1."""
    name, regions, home = run
    apis, why = common.run_clients(registry, regions)
    deleted, failed = launch.delete(apis, {**launch.find(apis, namespace, name, home), **why})
    for line in deleted:
        print(f"deleted {line}", file=sys.stderr)
    if failed:
        print(f"error: run {name} not wholly deleted: {'; '.join(failed)}; run `gkr delete` again", file=sys.stderr)
        raise SystemExit(Exit.FAILED)
    print(f"deleted run {name} in {', '.join(regions)}", file=sys.stderr)


command = options.typer_command("delete", delete, options.where_options())
