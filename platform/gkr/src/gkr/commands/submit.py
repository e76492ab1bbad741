"""`gkr submit`: a job from a file, flags or both; its summary, then its objects printed (--dry-run) or applied.

Its command line is parsed by argparse, the job keys' options built from their declarations
(gkr/spec.py, through job_args): a submit loads neither click, typer nor rich. What a submit
does is computed by gkr.plan, and this module only prints and applies it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from contract.problem import Exit
from gkr import kube, plan
from gkr.commands import common
from gkr.commands.job_args import JobParser
from gkr.flags import Flags, from_flags
from gkr.registry import Located
from gkr.spec import AFTER_DASHES, JobSpec
from gkr.summary import run_summary, summary

SUMMARY = "Submit a RayJob (default), a persistent RayCluster or a plain Job."
WORKDIR_HELP = "a local folder packed (without .gitignore/.gkrignore matches) and uploaded as the RayJob's working_dir"
DRY_RUN_HELP = "print the manifests, apply nothing"


def parser() -> JobParser:
    parser = JobParser("gkr submit", SUMMARY)
    parser.epilog = "The command goes after --, e.g. gkr submit --name exp-1 --team research -- python train.py"
    parser.add_argument("-f", "--file", help="job file (YAML)")
    parser.add_job_keys(JobSpec)
    parser.add_argument("--workdir", help=WORKDIR_HELP)
    parser.add_argument("--dry-run", action="store_true", help=DRY_RUN_HELP)
    parser.add_argument("-o", "--output", default="yaml", help=f"{common.OUTPUT_HELP} (default: yaml)")
    parser.add_where("registry", "context")
    return parser


def main(args: list[str]) -> int:
    """`gkr submit ARGS`: the exit code (bad input and the cluster's refusal end in SystemExit, gkr.commands.common)."""
    with common.bad_input():
        options, given = parser().parse(args)
    command = given.get(AFTER_DASHES) or ()
    if options.file is None and command and command[0].endswith((".yaml", ".yml")):
        common.fail(
            [
                f"{command[0]} is taken as the command; did you mean `gkr submit -f {command[0]}`? (a command goes after --)"
            ]
        )
    with common.bad_input():
        flags = from_flags(given)
    submit_job(options.file, flags, options.workdir, options.dry_run, options.output, options.registry, options.context)
    return Exit.OK


def submit_job(
    file: str | None,
    flags: Flags,
    workdir: str | None,
    dry_run: bool,
    output: str,
    registry: str | None,
    context: str | None,
) -> None:
    """What `submit` and `preflight` share: plan, print the summary and warnings, then print or apply."""
    user, found = common.located(registry)
    with common.bad_input():
        planned = plan.plan(file, flags, found, user, context, workdir)
    if isinstance(planned, plan.Across):
        _tell(run_summary(planned.run), planned.warnings)
        _submit_run(planned.run, found, dry_run, output)
    else:
        _tell(summary(planned.resolved, context), planned.warnings)
        _submit_one(planned, found, workdir, dry_run, output, context)


def _tell(text: str, warnings: list[str]) -> None:
    """What the job asks for, then what the user should know before it is applied: on stderr, stdout is the objects."""
    print(text, file=sys.stderr)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)


def _submit_one(
    one: plan.One, found: Located, workdir: str | None, dry_run: bool, output: str, context: str | None
) -> None:
    resolved, objects = one.resolved, one.objects
    if workdir is not None:
        _with_workdir(Path(workdir).expanduser(), one, found, dry_run, output, context)
        return
    if dry_run:
        common.print_objects(objects, output)
        return
    _apply(common.connect(found, resolved.region, context), objects, context or resolved.context)
    print(f"submitted {resolved.spec.kind} {resolved.spec.name} to {resolved.namespace}", file=sys.stderr)


def _with_workdir(folder: Path, one: plan.One, found: Located, dry_run: bool, output: str, context: str | None) -> None:
    """The job with the researcher's folder as its working_dir: packed, then uploaded with the objects applied."""
    from gkr import workdir as workdirs  # packing and uploading load only with --workdir

    resolved = one.resolved
    with common.bad_input():
        package, target = workdirs.prepare(
            folder, resolved.spec.kind, resolved.region.checkpoint_bucket, resolved.team.name, one.objects
        )
    described = workdirs.describe(package, target)
    try:
        if dry_run:
            print(f"would upload {described}", file=sys.stderr)
            common.print_objects(one.objects, output)
            return
        api = common.connect(found, resolved.region, context)
        with common.api_errors(f"uploading the workdir to {target}"):
            uploaded = workdirs.upload(package, target, found.registry.project)
        print(f"{'uploaded' if uploaded else 'already uploaded'} {described}", file=sys.stderr)
        _apply(api, one.objects, context or resolved.context)
    finally:
        package.zip_path.unlink(missing_ok=True)
    print(f"submitted {resolved.spec.kind} {resolved.spec.name} to {resolved.namespace}", file=sys.stderr)


def _submit_run(run: Any, found: Located, dry_run: bool, output: str) -> None:
    """A run across regions: every cluster's objects printed, or applied all or nothing."""
    from gkr import launch  # runs across regions only

    registry = found.registry
    if dry_run:
        by_context = [(registry.context(run.home.resolved.region), o) for o in run.lighthouse]
        by_context += [(registry.context(p.resolved.region), o) for p in run.parts for o in (p.secret, p.rayjob)]
        common.print_per_cluster(by_context, output)
        return
    apis = {p.region: common.connect(found, p.resolved.region, None) for p in run.parts}  # every context first
    try:
        launch.submit(run, apis, lambda line: print(line, file=sys.stderr))
    except launch.Failed as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(Exit.FAILED) from None
    regions = ", ".join(f"{p.region} ({registry.context(p.resolved.region)})" for p in run.parts)
    print(f"submitted run {run.name} to {run.home.resolved.namespace} in {regions}", file=sys.stderr)


def _apply(api: Any, objects: list[dict[str, Any]], context: str) -> None:
    with common.api_errors(f"applying to {context}"):
        for obj in objects:
            kube.apply(api, obj)
