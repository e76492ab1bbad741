"""Everything the review compares, taken from one checkout.

What needs the checkout's own code (its fleet plan, whether its generated tree
is current, its synthesized Terraform) comes from the checkout's
scripts/plan_side.py, run by that file's path as a process of its own, and is
read back as untrusted data (review.side); in GitHub the pull request's
document is made in a job without write rights and handed over as an
artifact. What Argo CD applies, the committed Kubernetes tree, the review
renders itself with its own code, because that is what Argo CD syncs: so a
HEAD whose committed tree is stale against its own fleet.yaml (`make
generate` not run) is refused, as its report would otherwise say "no change"
for a pool, team or region that the merge then half-applies. A stale BASE is
what is deployed, so it is compared as committed, with a note.

Nothing is fetched to render either side: a kustomization that names a remote
resource or base ends the review before anything is built, and HEAD's Argo CD
sources that can change under the same reference (a tag, a branch, a chart
version without a digest) are refused, in one line naming the file or the
Application (fleet.gitops.remote); BASE's are noted, as what is deployed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleet.gitops.argocd import CLUSTERS_DIR
from fleet.gitops.check import load_cluster, mutable_sources
from fleet.gitops.validate import crd_roots
from review import side as side_document
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


LAUNCHER = Path("scripts/run_checkout.py")  # in every checkout: runs its commands with its own code
PRODUCER = Path("scripts/plan_side.py")  # in every checkout: its side of the review, as one JSON document


def produce(root: Path, side: str, out: Path) -> side_document.Side:
    """Run the checkout's own producer by its file path; read what it wrote as data."""
    env = {
        **os.environ,
        # A BASE worktree lies in a temporary folder, beside no CRDs: look where this checkout looks too.
        "MERIDIAN_CRDS": os.pathsep.join(str(p) for p in crd_roots(root)),
    }
    result = subprocess.run(
        [sys.executable, str(root / PRODUCER), "--out", str(out)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines()
        raise ReviewError(f"{side}: {lines[-1] if lines else f'{PRODUCER} exited {result.returncode}'}")
    return read_side(out, side)


def read_side(path: Path, side: str) -> side_document.Side:
    try:
        return side_document.load(path)
    except side_document.SideError as exc:
        raise ReviewError(f"{side}: {exc}") from None


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


def take(
    root: Path,
    side: str,
    workdir: Path,
    kubectl: str = "kubectl",
    require_current: bool = True,
    document: Path | None = None,
) -> Snapshot:
    """`document`: the side's plan document, already made (the pull request's, from its own job); else
    the checkout's producer makes it here. `require_current`: refuse (ReviewError) a stale generated tree."""
    if not (root / "fleet.yaml").is_file():
        return Snapshot(None, notes=[f"{side} has no fleet.yaml: everything counts as added"])
    if document is None:
        if not (root / PRODUCER).is_file():
            raise ReviewError(
                f"{side}: no {PRODUCER.as_posix()}, which plans it for the review: rebase it onto a main that has it"
            )
        workdir.mkdir(parents=True, exist_ok=True)
        made = produce(root, side, workdir / "side.json")
    else:
        made = read_side(document, side)
    snapshot = Snapshot(made.plan, made.stacks)
    problem = stale_generated(side, subprocess.CompletedProcess([], made.generate_returncode, "", made.generate_stderr))
    if problem is not None and require_current:
        raise ReviewError(problem)
    if problem is not None:
        snapshot.notes.append(f"{problem}; compared as committed, which is what Argo CD applies")
    clusters_dir = root / CLUSTERS_DIR
    for cluster_dir in sorted(p for p in clusters_dir.glob("*") if p.is_dir()) if clusters_dir.is_dir() else []:
        tree, findings = load_cluster(root, cluster_dir.name, kubectl)
        if findings:
            raise ReviewError(f"{side}: {findings[0]}")
        mutable = mutable_sources(tree)
        if mutable and require_current:
            raise ReviewError(f"{side}: {mutable[0]}")
        snapshot.notes += [f"{side} syncs what can change under the same reference: {m}" for m in mutable]
        snapshot.clusters[cluster_dir.name] = [o for _, o in tree.objects()]
    return snapshot
