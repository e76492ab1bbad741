"""Everything the review compares, taken from one checkout with that checkout's own code.

BASE is reviewed with BASE's generator and stacks, not HEAD's: each checkout's
plan, generator check and synthesis run as that checkout's own commands
(`meridian`, and infra's entry point `meridian-synth`) through its
`scripts/run_checkout.py`, which puts the checkout's own code first; the review
passes its environment on unchanged (PYTHONPATH included) but for where to find
the CRDs. Kubernetes objects are built from the
checkout's committed tree, because that is what Argo CD syncs; so a HEAD whose
committed tree is stale against its own fleet.yaml (`make generate` not run) is
refused: its report would otherwise say "no change" for a pool, team or region
that the merge then half-applies. A stale BASE is what is deployed, so it is
compared as committed, with a note.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleet.gitops.argocd import CLUSTERS_DIR
from fleet.gitops.check import load_cluster
from fleet.gitops.validate import crd_roots
from review.kubernetes import Clusters
from review.terraform import Stacks


class ReviewError(Exception):
    """The review cannot be made; the message says why and what to do."""


@dataclass
class Snapshot:
    plan: dict[str, Any] | None  # `meridian plan --json`
    stacks: Stacks = field(default_factory=dict)
    clusters: Clusters = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


LAUNCHER = Path("scripts/run_checkout.py")  # in every checkout: runs its console scripts with its own code


def _run(command: str, args: list[str], root: Path) -> subprocess.CompletedProcess[str]:
    """`command` (a console script of the checkout at `root`) with that checkout's code, in `root`."""
    env = {
        **os.environ,
        # A BASE worktree lies in a temporary folder, beside no CRDs: look where this checkout looks too.
        "MERIDIAN_CRDS": os.pathsep.join(str(p) for p in crd_roots(root)),
    }
    return subprocess.run(
        [sys.executable, str(root / LAUNCHER), command, *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def stale_generated(side: str, check: subprocess.CompletedProcess[str]) -> str | None:
    """One line from `meridian generate --check`'s result, or None when the committed tree is current."""
    if check.returncode == 0:
        return None
    lines = check.stderr.strip().splitlines()
    if check.returncode != 1:
        return f"{side}: `meridian generate --check` failed: {lines[-1] if lines else check.returncode}"
    files = [line.removeprefix("stale: ") for line in lines if line.startswith("stale: ")]
    shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    return (
        f"{side}: the committed kustomize/ and argocd/ files are stale against its fleet.yaml ({shown}): "
        "run `make generate` and commit the result"
    )


def take(root: Path, side: str, workdir: Path, kubectl: str = "kubectl", require_current: bool = True) -> Snapshot:
    """`require_current`: refuse (ReviewError) when the committed generated tree is stale; else note it."""
    fleet = root / "fleet.yaml"
    if not fleet.is_file():
        return Snapshot(None, notes=[f"{side} has no fleet.yaml: everything counts as added"])
    if not (root / LAUNCHER).is_file():
        raise ReviewError(
            f"{side}: no {LAUNCHER.as_posix()}, through which the review runs its commands with its own code: "
            "rebase it onto a main that has it"
        )
    result = _run("meridian", ["plan", "--json", "--fleet", str(fleet)], root)
    if result.returncode != 0:
        raise ReviewError(
            f"{side}: `meridian plan` failed: {result.stderr.strip().splitlines()[-1] if result.stderr.strip() else result.returncode}"
        )
    snapshot = Snapshot(json.loads(result.stdout))
    check = _run("meridian", ["generate", "--check", "--fleet", str(fleet), "--root", "."], root)
    problem = stale_generated(side, check)
    if problem is not None and require_current:
        raise ReviewError(problem)
    if problem is not None:
        snapshot.notes.append(f"{problem}; compared as committed, which is what Argo CD applies")
    if (root / "infra" / "meridian_infra" / "synth.py").is_file():
        out = workdir / "cdktf.out"
        result = _run("meridian-synth", ["--fleet", str(fleet), "--outdir", str(out)], root)
        if result.returncode != 0:
            raise ReviewError(f"{side}: synthesis failed: {result.stderr.strip()[-500:]}")
        snapshot.stacks = {
            p.parent.name: json.loads(p.read_text()) for p in sorted((out / "stacks").glob("*/cdk.tf.json"))
        }
    else:
        snapshot.notes.append(f"{side} has no Terraform stacks")
    clusters_dir = root / CLUSTERS_DIR
    for cluster_dir in sorted(p for p in clusters_dir.glob("*") if p.is_dir()) if clusters_dir.is_dir() else []:
        tree, findings = load_cluster(root, cluster_dir.name, kubectl)
        if findings:
            raise ReviewError(f"{side}: {findings[0]}")
        snapshot.clusters[cluster_dir.name] = [o for _, o in tree.objects()]
    return snapshot
