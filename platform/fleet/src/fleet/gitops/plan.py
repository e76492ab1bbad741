"""What Argo CD will apply to each cluster, for `make plan`: objects by kind per cluster.

The tree is rendered from the spec being planned (not the committed one) into
a scratch folder beside a copy of the repository's hand-written kustomize/base.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from fleet.gitops.check import ClusterTree, kinds, load_tree
from fleet.gitops.schemas import crd_schemas
from fleet.gitops.tree import render_tree
from fleet.gitops.validate import Finding
from fleet.load import LoadedFleet


def project_kubectl() -> str | None:
    """The kubectl pinned beside this interpreter (.venv/bin), else the one on PATH, else None.

    Beside the interpreter first: a machine's own kubectl may be any version.
    """
    beside = Path(sys.executable).parent / "kubectl"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("kubectl")


NO_KUBECTL = "no kubectl: run `make setup` (it puts the pinned kubectl in .venv/bin) or put kubectl on PATH"


def built_trees(repo: Path, loaded: LoadedFleet, kubectl: str = "kubectl") -> list[tuple[ClusterTree, list[Finding]]]:
    """Every cluster's tree as Argo CD would build it from this spec: rendered into a scratch folder
    beside a copy of the repository's hand-written kustomize/base, then built there (a copy, not a link:
    the build refuses a base that resolves outside the tree it builds, fleet.gitops.remote)."""
    fleet = loaded.fleet
    with tempfile.TemporaryDirectory(prefix="meridian-plan-") as tmp:
        root = Path(tmp)
        for rel, text in render_tree(loaded, crd_schemas(fleet, repo)).items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text, encoding="utf-8")
        shutil.copytree(repo / "kustomize" / "base", root / "kustomize" / "base", symlinks=True)
        return [load_tree(root, fleet, region, kubectl) for region in fleet.regions]


def render_plan(repo: Path, loaded: LoadedFleet, kubectl: str = "kubectl") -> str:
    lines = ["Argo CD, per cluster (objects built from this repository; upstream sources pinned)"]
    for tree, findings in built_trees(repo, loaded, kubectl):
        counts = kinds(tree)
        lines.append(f"{tree.cluster}: {sum(counts.values())} objects in {len(tree.apps)} applications")
        lines.append("  " + ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items())))
        upstream = [
            f"{name} ({source.get('chart') or source.get('path')} {source.get('targetRevision')})"
            for name, source in tree.upstream.items()
        ]
        lines.append("  upstream: " + ", ".join(upstream))
        lines += [f"  error: {f}" for f in findings]
    return "\n".join(lines) + "\n"
