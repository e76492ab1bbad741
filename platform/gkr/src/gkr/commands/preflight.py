"""`gkr preflight`: only the preflight suite, as an indexed Job on a chosen shape."""

from __future__ import annotations

import getpass
from typing import Annotated

import typer

from gkr.commands import job_options
from gkr.commands.common import Context, RegistryPath, bad_input, typer_command
from gkr.commands.submit import submit_job
from gkr.flags import as_flags, from_flags
from gkr.spec import JobSpec
from gkr.submit import preflight_job

SHAPE = {"pods": 2, "gpus_per_pod": 8}  # the default shape: two pods, so the all-reduce crosses nodes


def preflight(
    ctx: typer.Context,
    dry_run: Annotated[bool, typer.Option("--dry-run")] = False,
    registry: RegistryPath = None,
    context: Context = None,
) -> None:
    """Run only the preflight suite on a chosen shape (a Job: node checks, compute, then all-reduce across pods)."""
    with bad_input():
        chosen = from_flags(job_options.given(ctx))
    job = preflight_job(getpass.getuser(), chosen["pods"][1], chosen["gpus_per_pod"][1])
    submit_job(None, {**as_flags(job), **chosen}, None, dry_run, "yaml", registry, context)


command = typer_command("preflight", preflight, job_options.options(JobSpec, [*SHAPE, "team", "region", "pool"], SHAPE))
