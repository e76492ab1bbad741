"""Install Argo CD on one cluster and hand it the cluster's root application.

    .venv/bin/python scripts/bootstrap_argocd.py meridian-us-central1 [--dry-run]

Needs gcloud with credentials for the project, and kubectl: always the
project's, .venv/bin/kubectl by absolute path, never another one on PATH (its
version and its kustomize decide what gets applied). Run once per cluster; Argo
CD then manages itself from git. Each cluster has its own Argo CD, so one
region's outage never blocks another.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from contract.problem import Invalid, report
from fleet.gitops.bootstrap import NAMESPACE_MANIFEST, bootstrap_commands
from fleet.load import load

KUBECTL = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "kubectl"
GCLOUD_MISSING = (
    "error: no gcloud on PATH: install the Google Cloud CLI (https://cloud.google.com/sdk/docs/install), "
    "then `gcloud auth login`"
)


def resolve(command: list[str], kubectl: Path) -> list[str]:
    """The command with the project's kubectl in place of whatever `kubectl` PATH would find."""
    return [str(kubectl), *command[1:]] if command[0] == "kubectl" else command


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cluster")
    parser.add_argument("--fleet", default="fleet.yaml")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args()
    try:
        fleet = load(args.fleet).fleet
    except Invalid as exc:
        return report(exc)
    clusters = {fleet.cluster_name(r): r for r in fleet.regions}
    region = clusters.get(args.cluster)
    if region is None:
        print(f"error: no cluster {args.cluster!r} in {args.fleet}; use one of {', '.join(clusters)}", file=sys.stderr)
        return 2
    if not args.dry_run and not KUBECTL.is_file():
        print(f"error: no {KUBECTL}: run `make setup`", file=sys.stderr)
        return 2
    for planned in bootstrap_commands(fleet, region):
        command = resolve(planned, KUBECTL)
        print("+ " + shlex.join(command))
        if args.dry_run:
            continue
        if shutil.which(command[0]) is None:
            print(GCLOUD_MISSING if command[0] == "gcloud" else f"error: no {command[0]} on PATH", file=sys.stderr)
            return 2
        stdin = NAMESPACE_MANIFEST if command[-1] == "-" else None
        if subprocess.run(command, input=stdin, text=True, check=False).returncode != 0:
            print(
                f"error: `{shlex.join(command)}` failed; fix it and run this again (every step is idempotent)",
                file=sys.stderr,
            )
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
