"""`scripts/cdktn deploy STACK`: apply a stack only when its synthesis is the one the review approved.

    MERIDIAN_REVIEWED=reviewed.json scripts/cdktn deploy us-east4 [--auto-approve]

1. Read the decision's record (review.reviewed): the reviewed digest of STACK.
2. Synthesize every stack into a fresh folder (this checkout's code, through
   scripts/run_checkout.py, which refuses a module that two distributions
   define) and take STACK's digest. Any difference from the record is one line,
   exit 2, and Terraform is never called: code that behaves differently at
   deploy than under review (issue 36: a shadowed `safeyaml` that cut a pool to
   one node only under `cdktn deploy`) changes the digest.
3. Run Terraform in that very folder: `init`, `plan -out`, then `apply` of the
   saved plan, so what is applied is what was just compared (Terraform applies a
   saved plan exactly, or fails if the state moved; Atlantis and HCP Terraform's
   saved-plan runs work the same way: apply only the plan that was approved).
4. Record the applied stack where the next review reads it: `<stack>.tf.json`
   under MERIDIAN_DEPLOYED (a folder, or a gs:// prefix written with `gcloud
   storage cp`), by default beside the stack's state (`gs://<state bucket>/
   <fleet>/deployed/`, or infra/.state/deployed/ with the local backend).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contract.problem import Exit, Invalid
from review import reviewed

ROOT = Path(__file__).resolve().parents[4]  # platform/review/src/review/deploy.py -> the checkout
STATE = ROOT / "infra" / ".state"


class Refused(Exception):
    """The deploy does not go ahead; one line says why and what to do."""


def _stack_json(outdir: Path, stack: str) -> dict[str, Any]:
    from meridian_infra.synth import read_stacks  # the checkout's infra code, on the launcher's path

    try:
        return read_stacks(outdir, [stack])[stack]
    except KeyError:
        raise Refused(f"no stack {stack!r} in this checkout's synthesis: deploy one of its stacks") from None


def synthesize(fleet: Path, outdir: Path, backend: str) -> None:
    from meridian_infra.synth import synth

    try:
        synth(fleet, outdir, backend)  # type: ignore[arg-type]  # checked by synth's own _backend on the CLI
    except Invalid as exc:
        raise Refused(f"synthesis failed: {exc.lines[0]}") from None


def compare(stack: str, body: dict[str, Any], record: Path) -> str:
    """The stack's digest when it is the reviewed one; Refused otherwise."""
    wanted = reviewed.load(record).get(stack)
    found = reviewed.digest(body)
    if wanted is None:
        raise Refused(f"{record}: the review recorded no stack {stack}: deploy only a stack the review saw")
    if found != wanted:
        raise Refused(
            f"stack {stack}: this checkout synthesizes sha256 {found[:16]}, the review approved {wanted[:16]} "
            f"({record}): deploy the reviewed commit, or get this one reviewed; Terraform was not run"
        )
    return found


def destination(body: dict[str, Any], backend: str) -> str:
    """Where the applied stack is recorded: beside its state."""
    if configured := os.environ.get("MERIDIAN_DEPLOYED"):
        return configured
    gcs = ((body.get("terraform") or {}).get("backend") or {}).get("gcs") or {}
    if backend == "gcs" and gcs.get("bucket") and gcs.get("prefix"):
        return f"gs://{gcs['bucket']}/{str(gcs['prefix']).rpartition('/')[0]}/deployed"
    return str(STATE / "deployed")


def keep(stack: str, body: dict[str, Any], where: str) -> str:
    target = f"{where.rstrip('/')}/{stack}.tf.json"
    data = reviewed.canonical(body)
    if where.startswith("gs://"):
        subprocess.run(["gcloud", "storage", "cp", "-", target], input=data, check=True)
    else:
        path = Path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.partial")
        partial.write_bytes(data)
        os.replace(partial, path)
    return target


def terraform(folder: Path, *args: str) -> None:
    binary = os.environ.get("TERRAFORM_BINARY_NAME", "terraform")
    result = subprocess.run([binary, *args], cwd=folder, check=False)
    if result.returncode != 0:
        raise Refused(f"`{binary} {args[0]}` failed (exit {result.returncode}) in {folder}: see its output above")


def deploy(stack: str, record: Path, fleet: Path, backend: str, auto_approve: bool, workdir: Path) -> str:
    outdir = workdir / "cdktf.out"
    reviewed.load(record)  # a bad record is refused before anything is synthesized
    synthesize(fleet, outdir, backend)
    body = _stack_json(outdir, stack)
    found = compare(stack, body, record)
    print(f"stack {stack}: synthesis matches the reviewed plan (sha256 {found[:16]})", file=sys.stderr)
    folder = outdir / "stacks" / stack
    terraform(folder, "init", "-input=false")
    terraform(folder, "plan", "-input=false", "-out=reviewed.tfplan")
    if not auto_approve:
        if not sys.stdin.isatty():
            raise Refused("the plan above was not applied: pass --auto-approve, or run in a terminal to confirm")
        if input(f"Apply this plan to {stack}? Only 'yes' applies: ").strip() != "yes":
            raise Refused("not applied: the answer was not 'yes'")
    terraform(folder, "apply", "-input=false", "reviewed.tfplan")
    return keep(stack, body, destination(body, backend))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="cdktn deploy", description="Apply one stack, only if its synthesis is the one the review approved."
    )
    parser.add_argument("stack", help="one stack: global or a region")
    parser.add_argument("--auto-approve", action="store_true", help="apply the saved plan without asking")
    parser.add_argument("--reviewed", type=Path, default=os.environ.get("MERIDIAN_REVIEWED") or None)
    args, rest = parser.parse_known_args(argv)
    if rest:
        print(f"error: cdktn deploy {' '.join(rest)}: one stack per deploy, and no other options", file=sys.stderr)
        return Exit.USAGE
    if args.reviewed is None:
        print(
            "error: cdktn deploy needs the decision's record of the reviewed plan: set MERIDIAN_REVIEWED to the "
            "`plan-review-reviewed` artifact of this commit's pull request (reviewed.json)",
            file=sys.stderr,
        )
        return Exit.USAGE
    fleet = Path(os.environ.get("MERIDIAN_FLEET", str(ROOT / "fleet.yaml")))
    backend = os.environ.get("MERIDIAN_BACKEND", "gcs")
    try:
        with tempfile.TemporaryDirectory(prefix="meridian-deploy-") as tmp:
            where = deploy(args.stack, args.reviewed, fleet, backend, args.auto_approve, Path(tmp))
    except (Refused, reviewed.RecordError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return Exit.USAGE
    except subprocess.CalledProcessError as exc:
        print(f"error: applied, but the record was not written ({exc.cmd[0]} exit {exc.returncode})", file=sys.stderr)
        return Exit.FAILED
    print(f"stack {args.stack}: applied; recorded at {where}", file=sys.stderr)
    return Exit.OK


if __name__ == "__main__":
    raise SystemExit(main())
