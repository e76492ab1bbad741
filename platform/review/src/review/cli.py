"""`meridian-review --base REF`: the plan review a pull request gets.

Exit codes: 0 no destructive change, 3 destructive changes present (CI can
require a second approval), 2 the review could not be made.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from fleet.gitops.plan import NO_KUBECTL, project_kubectl
from review.report import markdown, terminal
from review.review import review
from review.snapshot import ReviewError

DESTRUCTIVE = 3


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="meridian-review", description="Review what HEAD changes against BASE in every region and cluster."
    )
    parser.add_argument("--base", required=True, help="git ref to compare with, e.g. origin/main")
    parser.add_argument("--repo", type=Path, default=Path("."), help="repository (default: .)")
    parser.add_argument(
        "--out", type=Path, default=Path("review.md"), help="Markdown report to write (default: review.md)"
    )
    parser.add_argument(
        "--plans",
        type=Path,
        help="folder of <stack>.json from `terraform show -json`: use real plans, not the estimate",
    )
    parser.add_argument(
        "--kubectl", help="kubectl with kustomize (default: the one in .venv/bin beside this Python, else on PATH)"
    )
    args = parser.parse_args(argv)
    kubectl = args.kubectl or project_kubectl()
    if kubectl is None:
        print(f"error: {NO_KUBECTL}", file=sys.stderr)
        return 2
    try:
        result = review(args.repo.resolve(), args.base, args.plans, kubectl)
    except ReviewError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args.out.write_text(markdown(result), encoding="utf-8")
    sys.stdout.write(terminal(result))
    print(f"report: {args.out}")
    return DESTRUCTIVE if result.destructive else 0


if __name__ == "__main__":
    raise SystemExit(main())
