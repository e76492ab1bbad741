"""Compare HEAD (the working tree) with BASE (a temporary git worktree)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from review.access import access_changes
from review.capacity import Delta, capacity_deltas
from review.kubernetes import ClusterDiff, diff_clusters
from review.snapshot import LAUNCHER, ReviewError, Snapshot, take
from review.terraform import StackDiff, diff_plan, diff_stacks


@dataclass
class Review:
    base: str
    head: str
    stacks: list[StackDiff]
    clusters: list[ClusterDiff]
    regions: list[Delta]
    teams: list[Delta]
    notes: list[str] = field(default_factory=list)
    access: list[str] = field(default_factory=list)  # firewall rules created, removed or altered (access.py)

    @property
    def destructive(self) -> list[str]:
        lines = [f"{d.stack}: {r.destructive}" for d in self.stacks for r in d.destructive]
        for cluster in self.clusters:
            for o in cluster.objects:
                kind = o.key[1]
                if (kind == "Namespace" and o.action == "removed") or (
                    kind == "CustomResourceDefinition" and o.action == "removed"
                ):
                    lines += [f"{cluster.cluster}: {flag}" for flag in o.flags]
        return lines


def _git(repo: Path, *args: str) -> str:
    result = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ReviewError(f"git {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout.strip()


def base_snapshot(repo: Path, base: str, workdir: Path, kubectl: str) -> tuple[str, Snapshot]:
    sha = _git(repo, "rev-parse", "--verify", f"{base}^{{commit}}")
    tree = workdir / "base"
    _git(repo, "worktree", "add", "--detach", str(tree), sha)
    try:
        notes = []
        if not (tree / LAUNCHER).is_file() and (repo / LAUNCHER).is_file():
            # A BASE from before the launcher: HEAD's copy runs BASE's code just as well (it reads where from
            # its own location), so the temporary worktree gets one.
            (tree / LAUNCHER).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / LAUNCHER, tree / LAUNCHER)
            notes.append(f"BASE {base} has no {LAUNCHER.as_posix()}: HEAD's ran BASE's own code")
        snapshot = take(tree, f"BASE {base}", workdir / "base-out", kubectl, require_current=False)
        snapshot.notes[:0] = notes
        return sha, snapshot
    finally:
        _git(repo, "worktree", "remove", "--force", str(tree))


def review(
    repo: Path, base: str, plans: Path | None = None, kubectl: str = "kubectl", cache: dict[str, Snapshot] | None = None
) -> Review:
    """`cache` keeps BASE snapshots by commit, for callers that review several heads against one base."""
    with tempfile.TemporaryDirectory(prefix="meridian-review-") as tmp:
        work = Path(tmp)
        sha = _git(repo, "rev-parse", "--verify", f"{base}^{{commit}}")
        after = take(repo, "HEAD", work / "head-out", kubectl)  # first: a stale HEAD is refused before BASE costs
        if cache is not None and sha in cache:
            before = cache[sha]
        else:
            sha, before = base_snapshot(repo, sha, work, kubectl)
            if cache is not None:
                cache[sha] = before
    stacks = diff_stacks(before.stacks, after.stacks)
    notes = before.notes + after.notes
    if plans is not None:
        planned = {p.stem: diff_plan(p.stem, json.loads(p.read_text())) for p in sorted(plans.glob("*.json"))}
        if not planned:
            raise ReviewError(
                f"{plans}: no <stack>.json plan files (terraform show -json); pass the folder that holds them"
            )
        stacks = [planned.pop(d.stack, d) for d in stacks] + list(planned.values())
        stacks = [d for d in stacks if d.resources]
    regions, teams = capacity_deltas(before.plan, after.plan)
    head = _git(repo, "rev-parse", "--short", "HEAD")
    dirty = " + uncommitted changes" if _git(repo, "status", "--porcelain", "--untracked-files=no") else ""
    return Review(
        f"{base} ({sha[:10]})",
        f"HEAD ({head}){dirty}",
        stacks,
        diff_clusters(before.clusters, after.clusters),
        regions,
        teams,
        notes,
        access_changes(before.stacks, after.stacks),
    )
