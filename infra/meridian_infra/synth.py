"""Synthesize the stacks: for `make plan` (atomically, with a report) and for the cdktn CLI."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from contract.problem import Invalid, report
from fleet.load import load
from meridian_infra.app import build_app
from meridian_infra.backend import BACKENDS, Backend
from meridian_infra.report import Stacks, render

INFRA = Path(__file__).resolve().parent.parent
DEFAULT_OUT = INFRA / "cdktf.out"


def read_stacks(outdir: Path, order: Sequence[str]) -> Stacks:
    """Each stack's JSON, in the given order of stack names."""
    manifest = json.loads((outdir / "manifest.json").read_text())["stacks"]
    return {name: json.loads((outdir / manifest[name]["synthesizedStackPath"]).read_text()) for name in order}


def synth(fleet_path: str | Path, outdir: Path = DEFAULT_OUT, backend: Backend = "gcs") -> Stacks:
    """Synthesize every stack into `outdir`, replacing it only once all succeeded."""
    loaded = load(fleet_path)  # Invalid before anything is written
    outdir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".synth-", dir=outdir.parent))
    try:
        build_app(loaded, str(staging), backend).synth()
        stacks = read_stacks(staging, ["global", *(r.name for r in loaded.fleet.regions)])
        if outdir.exists():
            shutil.rmtree(outdir)
        staging.rename(outdir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return stacks


def _backend(value: str) -> Backend:
    if value not in BACKENDS:
        raise Invalid([f"MERIDIAN_BACKEND={value!r}: unknown backend; use one of {', '.join(BACKENDS)}"])
    return value


def synth_from_env() -> int:
    """What `cdktn synth` runs (infra/main.py): the CLI decides the output folder."""
    try:
        loaded = load(os.environ.get("MERIDIAN_FLEET", str(INFRA.parent / "fleet.yaml")))
        backend = _backend(os.environ.get("MERIDIAN_BACKEND", "gcs"))
    except Invalid as exc:
        return report(exc)
    outdir = os.environ.get("CDKTF_OUTDIR", str(DEFAULT_OUT))
    build_app(loaded, outdir, backend).synth()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="meridian-synth", description="Synthesize Meridian's Terraform stacks and summarize them."
    )
    parser.add_argument("--fleet", default="fleet.yaml")
    parser.add_argument("--outdir", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--backend", default=os.environ.get("MERIDIAN_BACKEND", "gcs"))
    args = parser.parse_args(argv)
    try:
        stacks = synth(args.fleet, args.outdir, _backend(args.backend))
    except Invalid as exc:
        return report(exc)
    sys.stdout.write(render(stacks, os.path.relpath(args.outdir)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
