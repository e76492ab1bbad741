"""`meridian-review --base REF`: the plan review a pull request gets.

Exit codes: 0 nothing flagged; 3 destructive changes present; 4 changes a code
owner must approve (access widened, versions upgraded, the review's own code
or workflow changed) and nothing destructive; 2 the review could not be made.
The labels to set are written to --labels either way, so the workflow sets
them from a file, not from the exit code.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from fleet.gitops.plan import NO_KUBECTL, project_kubectl
from review import reviewed
from review.report import COMMENT_LIMIT, markdown, summary, terminal
from review.review import review
from review.snapshot import ReviewError


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
    parser.add_argument(
        "--head-plan",
        type=Path,
        help="HEAD's plan document (scripts/plan_side.py, made in a job of its own); default: run HEAD's producer here",
    )
    parser.add_argument(
        "--summary", type=Path, help=f"also write the pull request comment (under {COMMENT_LIMIT:,} characters)"
    )
    parser.add_argument("--report-url", default="", help="where the full report can be read, linked from the summary")
    parser.add_argument("--labels", type=Path, help="also write the labels to set, one a line")
    parser.add_argument(
        "--reviewed", type=Path, help="also write the record the deploy checks: each HEAD stack's digest (reviewed.py)"
    )
    parser.add_argument(
        "--deployed", type=Path, help="folder of <stack>.tf.json the deploys recorded: compare HEAD with those"
    )
    args = parser.parse_args(argv)
    kubectl = args.kubectl or project_kubectl()
    if kubectl is None:
        print(f"error: {NO_KUBECTL}", file=sys.stderr)
        return 2
    try:
        deployed = reviewed.deployed_stacks(args.deployed) if args.deployed is not None else None
        result = review(
            args.repo.resolve(), args.base, args.plans, kubectl, head_plan=args.head_plan, deployed=deployed
        )
    except (ReviewError, reviewed.RecordError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args.out.write_text(markdown(result), encoding="utf-8")
    if args.summary is not None:
        args.summary.write_text(summary(result, args.report_url), encoding="utf-8")
    if args.labels is not None:
        args.labels.write_text("".join(f"{label}\n" for label in result.labels), encoding="utf-8")
    if args.reviewed is not None:
        document = reviewed.record(result.head_commit, result.exit_code, result.reviewed)
        args.reviewed.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    sys.stdout.write(terminal(result))
    print(f"report: {args.out}")
    return result.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
