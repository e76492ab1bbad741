"""gkr's commands, one module each, imported only when the command runs (or shows its own help).

A command's module has either `main(args) -> int`, when it parses its own arguments with argparse
(`submit`, `preflight`: gkr/commands/job_args.py; they load neither click, typer nor rich), or
`command`, a click command (through gkr's typer group, gkr/commands/group.py). gkr/cli.py runs
the first kind itself and hands the others to the group.
"""

from __future__ import annotations

HELP = """gkr: submit and inspect training jobs on the Meridian fleet.

Exit codes: 0 done, 1 the cluster said no (API error), 2 bad input (one line
per problem, nothing applied).
"""
# Each command's module and the summary `gkr --help` shows without loading it.
COMMANDS = {
    "submit": ("gkr.commands.submit", "Submit a RayJob (default), a persistent RayCluster or a plain Job."),
    "preflight": (
        "gkr.commands.preflight",
        "Run only the preflight suite on a chosen shape (a Job: node checks, compute, then all-reduce across pods).",
    ),
    "list": ("gkr.commands.list_jobs", "The team's jobs and clusters in a region."),
    "status": ("gkr.commands.status", "One job's status, as the cluster reports it."),
    "delete": ("gkr.commands.delete", "Delete a job or cluster, and its pods."),
    "logs": ("gkr.commands.logs", "Logs of a job's head, workers or all pods."),
    "dashboard": (
        "gkr.commands.dashboard",
        "Forward a running job's or cluster's Ray dashboard to localhost (kubectl port-forward; Ctrl-C stops).",
    ),
    "clusters": (
        "gkr.commands.clusters",
        "Regions, their clusters, GPU types and each team's quota (with --live: free / nominal, from Kueue).",
    ),
    "health": (
        "gkr.commands.health",
        "Operators: per cluster and pool, nodes by Warden state, deep checks due, failures in the last 7 days.",
    ),
    "registry": ("gkr.commands.registry", "The fleet registry gkr reads: which one, and a copy from a cluster."),
}
