"""Compare HEAD (the working tree, or the pull request's checkout) with BASE (a temporary git worktree).

This module and everything it calls are the deciding code: in the workflow they
come from the base branch. HEAD's code only ever runs as HEAD's
scripts/plan_side.py, in a process (in GitHub, a job) of its own, and what it
writes is read as data.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from contract.problem import Exit
from review.access import access_changes
from review.addresses import moved_ranges
from review.capacity import (
    Capacity,
    Delta,
    capacity_deltas,
    destructive_lines,
    queue_deltas,
    terraform_capacity,
    unallocated_deltas,
)
from review.fold import fold
from review.images import changed_paths_note, project_changes, registries, version_only
from review.inputs import changed_inputs, machinery, plan_inputs
from review.kubernetes import ClusterDiff, diff_clusters
from review.security import Finding, security_findings
from review.snapshot import LAUNCHER, PRODUCER, ReviewError, Snapshot, take
from review.terraform import StackDiff, diff_plan, diff_stacks
from review.versions import VersionChange, version_changes


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
    changed: list[str] = field(default_factory=list)  # files the change touches that the review reads (inputs.py)
    capacity: Capacity = field(default_factory=lambda: Capacity([], []))  # GPUs per region and pool (capacity.py)
    findings: list[Finding] = field(default_factory=list)  # what the change widens (security.py)
    versions: list[VersionChange] = field(default_factory=list)  # what it upgrades (versions.py)
    new_scopes: set[str] = field(default_factory=set)  # clusters and stacks only HEAD has
    # GPUs per region and pool in no team's quota on either side: lent through Kueue's cohort (capacity.py)
    unallocated: list[Delta] = field(default_factory=list)
    moved_ranges: list[str] = field(
        default_factory=list
    )  # regions whose planned ranges move: why, the pin (addresses.py)
    # nominal GPUs per ClusterQueue as rendered, beside `teams` from the plans (capacity.queue_deltas)
    queues: list[Delta] = field(default_factory=list)
    reviewed: dict[str, dict[str, Any]] = field(default_factory=dict)  # HEAD's stacks, as recorded (reviewed.py)
    head_commit: str = ""  # the full commit reviewed, for the record

    @property
    def machinery(self) -> list[str]:
        """Changed files that run or judge the review itself: shown first, and an owner must approve them."""
        return machinery(self.changed)

    @property
    def destructive(self) -> list[str]:
        """What takes capacity or data down: Terraform's deletions and replacements, any GPU capacity lost or
        moved (whatever caused it), deleted namespaces and CRDs."""
        lines = destructive_lines(self.stacks, self.capacity)
        for cluster in self.clusters:
            for o in cluster.objects:
                kind = o.key[1]
                if (kind == "Namespace" and o.action == "removed") or (
                    kind == "CustomResourceDefinition" and o.action == "removed"
                ):
                    lines += [f"{cluster.cluster}: {flag}" for flag in o.flags]
        return fold(lines)

    @property
    def security(self) -> list[str]:
        """Changes that widen who may do or reach what, one line each, folded where they repeat: the same
        change in several clusters is one line naming them; a new cluster, stack or namespace (a new team)
        is one line with how many findings it brings (each is in the full report)."""
        lines: dict[str, list[str]] = {}
        bundles: dict[str, int] = {}
        for f in self.findings:
            if f.scope in self.new_scopes:
                bundles[f"{f.scope}: new"] = bundles.get(f"{f.scope}: new", 0) + 1
            elif f.new_in:
                bundles[f"new namespace {f.new_in}"] = bundles.get(f"new namespace {f.new_in}", 0) + 1
            else:
                lines.setdefault(f.what, []).append(f.scope)
        folded = [f"{', '.join(scopes)}: {what}" for what, scopes in lines.items()]
        return folded + [
            f"{what}, with {n} security findings of its own (each in the full report)" for what, n in bundles.items()
        ]

    @property
    def upgrades(self) -> list[str]:
        """Version changes a code owner approves: control planes, nodes, charts, image pins weakened or moved to
        a new digest (a fleet image's line names what changed in its sources since the previous pin)."""
        return [v.line() for v in self.versions if v.approval]

    @property
    def labels(self) -> list[str]:
        flagged = (
            ("destructive", self.destructive),
            ("security", self.machinery + self.security),
            ("upgrade", self.upgrades),
        )
        return [name for name, lines in flagged if lines]

    @property
    def exit_code(self) -> int:
        """0 nothing flagged; 3 destructive (whatever else); 4 flagged for a code owner's approval only."""
        return Exit.DESTRUCTIVE if self.destructive else Exit.NEEDS_OWNER if self.labels else Exit.OK


def _git(repo: Path, *args: str) -> str:
    result = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ReviewError(f"git {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout.strip()


MAX_DOCKERFILE = 1024 * 1024  # bytes of HEAD's Dockerfile read as data; a real one is a few KB


def _head_dockerfile(repo: Path, repository: str) -> str | None:
    """HEAD's `platform/<image name>/Dockerfile` as text (data: review.images reads what it copies)."""
    path = repo / "platform" / repository.rsplit("/", 1)[-1] / "Dockerfile"
    if not path.is_file() or path.is_symlink():
        return None
    with path.open("rb") as handle:
        return handle.read(MAX_DOCKERFILE).decode("utf-8", "replace")


def image_pins_accepted(before: Snapshot, after: Snapshot) -> tuple[set[str], list[str]]:
    """(the fleet's registries, a note on images pinned by version only); refuses (ReviewError) a version-only
    image whose registry lets tags move in HEAD's Terraform (review.images)."""
    head = registries(after.stacks)
    known = {*registries(before.stacks), *head}
    unpinned = version_only(after.clusters, known)
    for reference, (_, registry) in unpinned.items():
        if not head.get(registry, False):
            raise ReviewError(
                f"HEAD: image {reference} is pinned by version only and registry {registry} lets tags move (its "
                "Terraform sets no docker_config.immutable_tags = true): pin its digest (meridian pin-image) or make "
                "the registry's tags immutable"
            )
    notes = []
    if unpinned:
        notes.append(
            f"not yet pinned by digest: {', '.join(unpinned)}; accepted while {', '.join(sorted(known))} keeps its "
            "tags immutable, until the images workflow proposes the digests"
        )
    return known, notes


BaseCache = dict[str, tuple[Snapshot, list[str]]]  # BASE commit -> its snapshot and what it reads (inputs.py)


def changed_files(repo: Path, sha: str) -> list[str]:
    """Files HEAD (working tree included, untracked files too) differs in from `sha`, by git, not by HEAD's code."""
    tracked = _git(repo, "diff", "--name-only", "--no-renames", sha).splitlines()
    untracked = _git(repo, "ls-files", "--others", "--exclude-standard").splitlines()
    return sorted({*tracked, *untracked} - {""})


def base_snapshot(repo: Path, base: str, workdir: Path, kubectl: str) -> tuple[str, Snapshot, list[str]]:
    """(commit, snapshot, what it reads): BASE, in a temporary worktree, planned by its own producer; what
    the review reads is BASE's list (inputs.py), so a pull request cannot take a path out of it."""
    sha = _git(repo, "rev-parse", "--verify", f"{base}^{{commit}}")
    tree = workdir / "base"
    _git(repo, "worktree", "add", "--detach", str(tree), sha)
    try:
        notes = []
        # A BASE from before the producer: HEAD's producer and the launcher it calls (`--module`, newer than
        # BASE's launcher) run BASE's own code just as well (each reads where from its own location).
        missing = [h for h in (PRODUCER, LAUNCHER) if not (tree / PRODUCER).is_file() or not (tree / h).is_file()]
        for helper in missing:
            if (repo / helper).is_file():
                (tree / helper).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(repo / helper, tree / helper)
                notes.append(f"BASE {base} has no {helper.as_posix()} fit for the review: HEAD's ran BASE's own code")
        snapshot = take(tree, f"BASE {base}", workdir / "base-out", kubectl, require_current=False)
        snapshot.notes[:0] = notes
        return sha, snapshot, plan_inputs(tree)
    finally:
        _git(repo, "worktree", "remove", "--force", str(tree))


def as_deployed(before: Snapshot, deployed: dict[str, dict[str, Any]]) -> Snapshot:
    """BASE with each stack the deploys recorded in place of BASE's synthesis, and a note where they differ."""
    drifted = sorted(s for s, body in deployed.items() if before.stacks.get(s) != body)
    if not drifted:
        return before
    note = f"what is deployed differs from BASE's synthesis in {', '.join(drifted)}: HEAD is compared with what is deployed there"
    return replace(before, stacks={**before.stacks, **deployed}, notes=[*before.notes, note])


def with_plans(plans: Path, stacks: list[StackDiff]) -> tuple[dict[str, dict[str, Any]], list[StackDiff]]:
    """Real plans (`terraform show -json`, one `<stack>.json` each) in place of the estimate, where given."""
    raw = {p.stem: json.loads(p.read_text()) for p in sorted(plans.glob("*.json"))}
    planned = {stem: diff_plan(stem, plan) for stem, plan in raw.items()}
    if not planned:
        raise ReviewError(
            f"{plans}: no <stack>.json plan files (terraform show -json); pass the folder that holds them"
        )
    stacks = [planned.pop(d.stack, d) for d in stacks] + list(planned.values())
    return raw, [d for d in stacks if d.resources]


def _versions(repo: Path, sha: str, before: Snapshot, after: Snapshot, known: Iterable[str]) -> list[VersionChange]:
    """Version changes, a new digest of the fleet's own images with what changed in its sources since."""
    return project_changes(
        version_changes(before.stacks, after.stacks, before.clusters, after.clusters),
        before.clusters,
        after.clusters,
        known,
        lambda change, previous: changed_paths_note(
            change,
            previous,
            sha,
            lambda *args: _git(repo, *args),
            lambda commit: changed_files(repo, commit),
            _head_dockerfile(repo, change.repository),
        ),
    )


def review(
    repo: Path,
    base: str,
    plans: Path | None = None,
    kubectl: str = "kubectl",
    cache: BaseCache | None = None,
    head_plan: Path | None = None,
    deployed: dict[str, dict[str, Any]] | None = None,
) -> Review:
    """`head_plan`: HEAD's plan document, made in a job of its own (the workflow); without it, HEAD's
    producer runs here. `cache` keeps BASE by commit, for callers that review several heads against one
    base. `deployed`: the stacks the last deploys applied (reviewed.deployed_stacks); each one replaces
    BASE's synthesis of that stack, so what slipped through once shows again."""
    with tempfile.TemporaryDirectory(prefix="meridian-review-") as tmp:
        work = Path(tmp)
        sha = _git(repo, "rev-parse", "--verify", f"{base}^{{commit}}")
        # First: a stale HEAD is refused before BASE costs anything.
        after = take(repo, "HEAD", work / "head-out", kubectl, document=head_plan)
        if cache is not None and sha in cache:
            before, inputs = cache[sha]
        else:
            sha, before, inputs = base_snapshot(repo, sha, work, kubectl)
            if cache is not None:
                cache[sha] = (before, inputs)
        changed = changed_inputs(inputs, changed_files(repo, sha))
    before = as_deployed(before, deployed or {})
    stacks = diff_stacks(before.stacks, after.stacks)
    known, image_notes = image_pins_accepted(before, after)
    notes = before.notes + after.notes + image_notes
    raw: dict[str, dict[str, Any]] = {}
    if plans is not None:
        raw, stacks = with_plans(plans, stacks)
    capacity = terraform_capacity(before.stacks, after.stacks, raw)
    head = _git(repo, "rev-parse", "--short", "HEAD")
    dirty = " + uncommitted changes" if _git(repo, "status", "--porcelain", "--untracked-files=no") else ""
    return Review(
        f"{base} ({sha[:10]})",
        f"HEAD ({head}){dirty}",
        stacks,
        diff_clusters(before.clusters, after.clusters),
        capacity.regions,
        capacity_deltas(before.plan, after.plan)[1],  # team quotas: what fleet.yaml gives Kueue
        notes,
        access_changes(before.stacks, after.stacks),
        changed,
        capacity,
        security_findings(before.clusters, after.clusters, before.stacks, after.stacks, before.plan, after.plan),
        _versions(repo, sha, before, after, known),
        {*after.clusters, *after.stacks} - {*before.clusters, *before.stacks},
        unallocated_deltas(before.plan, after.plan),
        moved_ranges(before.plan, after.plan),
        queue_deltas(before.clusters, after.clusters, before.plan, after.plan),
        after.stacks,
        _git(repo, "rev-parse", "HEAD"),
    )
