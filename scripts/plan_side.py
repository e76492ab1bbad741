"""One side of the plan review: what this checkout's code plans, as one JSON document.

    python <checkout>/scripts/plan_side.py --out side.json
    python scripts/plan_side.py --checkout pr --out side.json   (another checkout, planned under this copy's rules)

The plan review's deciding code never imports a pull request's code. It runs
this file by its path in each checkout (in GitHub, the pull request's side runs
in a job of its own, with no token that can write and no secrets) and reads
what it writes as data: the fleet plan (`meridian plan --json`), whether the
committed generated tree is current (`meridian generate --check`), and the
synthesized Terraform stacks (`meridian-synth`). Each command is called by its
module and function through scripts/run_checkout.py `--module`, with this
checkout's code first on sys.path, so no console script a checkout declares
decides what runs. With `--checkout`, this copy and its launcher plan another
checkout (its code, this copy's rules): the deciding workflow's plan job runs
the default branch's copy over the pull request's merge commit, in the default
branch's environment, so no build hook of the pull request runs before its
plan is taken. Everything else the review compares (the Kubernetes objects
Argo CD applies) it renders itself from the committed files.

Standard library only; exit 0 with the document written whole, or 2 with one
line on stderr and nothing written.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LAUNCHER = Path(__file__).resolve().with_name("run_checkout.py")
FORMAT = "meridian-plan-side/1"
FLEET_CLI, SYNTH = "fleet.cli:main", "meridian_infra.synth:main"
TAIL = 4000  # characters of a failed command's stderr kept: enough for its last lines


def run(root: Path, target: str, prog: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(LAUNCHER), "--root", str(root), "--module", target, prog, *args],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )


def last_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit {result.returncode}"


class Failed(Exception):
    pass


def side(root: Path, fleet: Path, workdir: Path) -> dict[str, Any]:
    plan = run(root, FLEET_CLI, "meridian", "plan", "--json", "--fleet", str(fleet))
    if plan.returncode != 0:
        raise Failed(f"`meridian plan` failed: {last_line(plan)}")
    check = run(root, FLEET_CLI, "meridian", "generate", "--check", "--fleet", str(fleet), "--root", ".")
    out = workdir / "cdktf.out"
    synth = run(root, SYNTH, "meridian-synth", "--fleet", str(fleet), "--outdir", str(out))
    if synth.returncode != 0:
        raise Failed(f"synthesis failed: {synth.stderr.strip()[-500:]}")
    return {
        "format": FORMAT,
        "plan": json.loads(plan.stdout),
        "generate_check": {"returncode": check.returncode, "stderr": check.stderr[-TAIL:]},
        "stacks": {p.parent.name: json.loads(p.read_text()) for p in sorted((out / "stacks").glob("*/cdk.tf.json"))},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="plan_side.py", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the JSON document to write")
    parser.add_argument("--checkout", type=Path, default=ROOT, help="the checkout to plan (default: this one)")
    parser.add_argument("--fleet", type=Path, help="default: the checkout's fleet.yaml")
    args = parser.parse_args(argv)
    root = args.checkout.resolve()
    fleet = (args.fleet or root / "fleet.yaml").resolve()
    with tempfile.TemporaryDirectory(prefix="meridian-plan-side-") as tmp:
        try:
            document = side(root, fleet, Path(tmp))
        except Failed as exc:
            print(f"error: {root}: {exc}", file=sys.stderr)
            return 2
    # Whole or not at all: a file beside the target, then a rename.
    partial = args.out.with_name(f".{args.out.name}.partial")
    partial.write_text(json.dumps(document, sort_keys=True), encoding="utf-8")
    os.replace(partial, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
