"""`gkr preflight`: only the preflight suite, as an indexed Job on a chosen shape."""

from __future__ import annotations

import getpass

from contract.problem import Exit
from gkr.commands.common import bad_input
from gkr.commands.job_args import JobParser
from gkr.commands.submit import DRY_RUN_HELP, submit_job
from gkr.flags import as_flags, from_flags
from gkr.spec import JobSpec
from gkr.submit import preflight_job

SUMMARY = "Run only the preflight suite on a chosen shape (a Job: node checks, compute, then all-reduce across pods)."
SHAPE = {"pods": 2, "gpus_per_pod": 8}  # the default shape: two pods, so the all-reduce crosses nodes


def parser() -> JobParser:
    parser = JobParser("gkr preflight", SUMMARY)
    parser.add_argument("--dry-run", action="store_true", help=DRY_RUN_HELP)
    parser.add_where("registry", "context")
    parser.add_job_keys(JobSpec, [*SHAPE, "team", "region", "pool"], SHAPE)
    return parser


def main(args: list[str]) -> int:
    """`gkr preflight ARGS`: the exit code (failures end in SystemExit, gkr.commands.common)."""
    with bad_input():
        options, given = parser().parse(args)
        chosen = from_flags(given)
    job = preflight_job(getpass.getuser(), chosen["pods"][1], chosen["gpus_per_pod"][1])
    submit_job(None, {**as_flags(job), **chosen}, None, options.dry_run, "yaml", options.registry, options.context)
    return Exit.OK
