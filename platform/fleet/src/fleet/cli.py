"""`meridian`: the platform engineer's command for the fleet spec.

    meridian plan [--fleet FILE] [--json]
    meridian generate [--fleet FILE] [--root DIR] [--check]
    meridian pin-image [--fleet FILE] FIELD IMAGE@sha256:DIGEST
    meridian goodput [--fleet FILE] [--days N] [--seed S] [--seeds N] [--spares N] [--json]

Exit codes: 0 success, 1 generated files are stale (--check),
2 invalid input (one line per problem on stderr), a remote kustomize resource
or base, or an upstream source that is not a commit or digest among them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from contract.problem import Invalid, report
from contract.spares import MAX as SPARES_MAX
from fleet.gitops.tree import OWNED, render_tree
from fleet.gitops.write import stale, write
from fleet.load import LoadedFleet, load
from fleet.summary import as_json, render


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="meridian", description="Plan and inspect the Meridian GPU fleet.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for unexpected errors")
    commands = parser.add_subparsers(dest="command", required=True)
    plan = commands.add_parser("plan", help="validate the fleet spec, plan address ranges, print the summary")
    plan.add_argument("--fleet", default="fleet.yaml", help="fleet spec to read (default: fleet.yaml)")
    plan.add_argument("--json", action="store_true", help="print the summary as JSON")
    plan.add_argument(
        "--objects", action="store_true", help="also build each cluster's Argo CD tree and count its objects"
    )
    generate = commands.add_parser(
        "generate", help="render kustomize/overlays/, argocd/clusters/ and generated/ from the spec"
    )
    generate.add_argument("--fleet", default="fleet.yaml", help="fleet spec to read (default: fleet.yaml)")
    generate.add_argument("--root", type=Path, default=Path("."), help="repository root to write into (default: .)")
    generate.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if the committed output is stale"
    )
    pin = commands.add_parser("pin-image", help="set versions.FIELD to an image pinned by digest (image workflow)")
    pin.add_argument("--fleet", default="fleet.yaml", help="fleet spec to edit (default: fleet.yaml)")
    pin.add_argument("field", help="warden_image, trainer_image or nccl_installer_image")
    pin.add_argument("image", help="REPOSITORY:VERSION@sha256:<64 hex digits>")
    goodput = commands.add_parser(
        "goodput",
        help="estimate the goodput of the fleet's largest jobs by simulation, and the best checkpoint interval",
    )
    goodput.add_argument("--fleet", default="fleet.yaml", help="fleet spec to read (default: fleet.yaml)")
    goodput.add_argument("--days", default="30", help="simulated period in days, 1-365 (default: 30)")
    goodput.add_argument("--seed", default="0", help="first random seed (default: 0)")
    goodput.add_argument("--seeds", default="5", help="seeds averaged per job and interval, 1-50 (default: 5)")
    goodput.add_argument(
        "--spares",
        default=None,
        help=f"spare replica groups (nodes) the shipped path's job holds per pool, 0-{SPARES_MAX} and at most the"
        " groups it trains (default: gkr's default for the pool's size, contract.spares)",
    )
    goodput.add_argument("--json", action="store_true", help="print the estimate as JSON")
    return parser


def _goodput(loaded: LoadedFleet, args: argparse.Namespace) -> int:
    from fleet.gitops.warden import config as warden_config
    from fleet.goodput.costs import Costs
    from fleet.goodput.report import as_json, render
    from fleet.goodput.sweep import estimate, rows_of

    rows = rows_of(loaded.fleet, Costs(), spares=args.spares)
    if not rows[0].regional:
        print(f"error: {args.fleet}: no GPU pools; add one under regions[].gpu_pools", file=sys.stderr)
        return 2
    policy = warden_config(loaded.fleet, loaded.fleet.regions[0])  # one `warden:` section for the fleet
    est = estimate(rows, args.days, range(args.seed, args.seed + args.seeds), policy=policy)
    if args.json:
        print(json.dumps(as_json(est), indent=2))
    else:
        sys.stdout.write(render(est))
    return 0


def _numbers(args: argparse.Namespace) -> None:
    """`meridian goodput`'s numbers, checked here so a bad one is one line (argparse would add its usage)."""
    limits = {"days": (float, 1, 365), "seed": (int, 0, 2**31), "seeds": (int, 1, 50), "spares": (int, 0, SPARES_MAX)}
    for name, (kind, low, high) in limits.items():
        text = getattr(args, name)
        if text is None:
            continue  # an option whose default is computed
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:  # NaN fails the comparison too
            raise Invalid([f"--{name}: {text!r} is not a number from {low} to {high}; give one in that range"])
        setattr(args, name, value)


def _pin(path: Path, field: str, image: str) -> int:
    from fleet.pins import pin_image

    updated = pin_image(path.read_text(encoding="utf-8"), field, image, str(path))
    staging = path.with_name(f".{path.name}.pin")
    staging.write_text(updated, encoding="utf-8")
    staging.replace(path)  # whole file or nothing
    print(f"{path}: versions.{field} = {image}")
    return 0


def _fetched(loaded: LoadedFleet, root: Path) -> list[str]:
    """What Argo CD or kustomize would fetch at render or sync time instead of reading it from the reviewed
    tree: remote entries in the hand-written kustomizations, upstream sources by tag (fleet.gitops.remote)."""
    from fleet.gitops import argocd, remote

    fleet = loaded.fleet
    lines = [str(finding) for finding in remote.scan(root.resolve())]
    for region in fleet.regions:
        where = f"{argocd.apps_path(fleet, region)}/applications.yaml"
        for app in argocd.cluster_apps(fleet, region):
            problem = remote.source_problem(app.source, fleet.gitops.repo)
            if problem is not None:
                lines.append(f"{where}: Application {app.name}: {problem}")
    return lines


def _generate(loaded: LoadedFleet, root: Path, check: bool) -> int:
    from fleet.gitops.schemas import crd_schemas  # reads the pinned CRDs

    fetched = _fetched(loaded, root)
    if fetched:  # before anything is written: invalid input writes nothing
        return report(Invalid(fetched))
    try:
        tree = render_tree(loaded, crd_schemas(loaded.fleet, root.resolve()))
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if check:
        differences = stale(root, tree)
        for line in differences:
            print(f"stale: {line}", file=sys.stderr)
        if differences:
            print("generated files are stale: run `make generate` and commit the result", file=sys.stderr)
            return 1
        print(f"generated files are current ({len(tree)} files)")
        return 0
    changed = write(root, tree)
    print(f"wrote {len(tree)} files under {', '.join(OWNED)} ({changed} changed)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "pin-image":
            return _pin(Path(args.fleet), args.field, args.image)
        if args.command == "goodput":
            _numbers(args)
        loaded = load(args.fleet)
    except Invalid as exc:
        return report(exc)
    except Exception as exc:
        if args.debug:
            raise
        print(f"internal error: {exc!r}; rerun with --debug and report it", file=sys.stderr)
        return 1
    if args.command == "generate":
        return _generate(loaded, args.root, args.check)
    if args.command == "goodput":
        try:
            return _goodput(loaded, args)
        except Invalid as exc:  # --spares beyond what a pool of the fleet holds (contract.spares)
            return report(exc)
    kubectl = None
    if args.objects:
        from fleet.gitops.plan import NO_KUBECTL, project_kubectl

        kubectl = project_kubectl()
        if kubectl is None:  # before the summary: one line, not a traceback after it
            print(f"error: --objects builds every cluster with kubectl; {NO_KUBECTL}", file=sys.stderr)
            return 2
    from fleet.quotaplan import unallocated_warnings

    for line in unallocated_warnings(loaded.fleet, loaded.quotas):  # stderr: --json stays one document
        print(f"warning: {loaded.path}: {line}", file=sys.stderr)
    if args.json:
        print(json.dumps(as_json(loaded.fleet, loaded.addresses, loaded.quotas), indent=2))
    else:
        sys.stdout.write(render(loaded.fleet, loaded.addresses, loaded.quotas))
    if kubectl is not None:
        from fleet.gitops.plan import render_plan  # needs the validation extras

        try:
            sys.stdout.write("\n" + render_plan(Path.cwd(), loaded, kubectl))
        except FileNotFoundError as exc:  # the pinned CRDs the registry's schemas come from
            print(f"error: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
