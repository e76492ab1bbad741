"""Every path whose change amounts to cluster-admin (or cloud IAM) needs a platform owner's review."""

from __future__ import annotations

import fnmatch

from fleet.gitops import argocd
from fleet.load import load
from review.inputs import owned, plan_inputs
from tests.conftest import REPO, SHIPPED

CODEOWNERS = REPO / ".github/CODEOWNERS"
# Projects whose applications may grant rights or create projects (argocd/README.md).
PRIVILEGED_PROJECTS = {"bootstrap", "platform"}


def _patterns() -> list[tuple[str, str]]:
    out = []
    for line in CODEOWNERS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            pattern, *owners = line.split()
            out.append((pattern, " ".join(owners)))
    return out


def _owned(path: str) -> bool:
    """CODEOWNERS semantics for the anchored patterns used here: `/dir/` owns everything below it."""
    parts = path.split("/")
    dirs = ["/".join(parts[:n]) + "/" for n in range(1, len(parts) + 1)]
    for pattern, _ in _patterns():
        anchored = pattern.lstrip("/")
        candidates = dirs if anchored.endswith("/") else [path]
        if any(fnmatch.fnmatchcase(c, anchored) for c in candidates):
            return True
    return False


def test_the_privileged_projects_sources_in_this_repository_are_owned() -> None:
    fleet = load(SHIPPED).fleet
    paths = set()
    for region in fleet.regions:
        for app in argocd.cluster_apps(fleet, region):
            source = app.source
            if app.project in PRIVILEGED_PROJECTS and source["repoURL"] == fleet.gitops.repo:
                paths.add(source["path"])
    paths.add("argocd/clusters/meridian-us-central1/root.yaml")  # what the bootstrap project syncs
    assert paths
    unowned = sorted(p for p in paths if not _owned(p))
    assert unowned == []
    # What those overlays are built from, and what generates them.
    for path in ("kustomize/base/warden/agent.yaml", "platform/fleet/src/fleet/gitops/teams.py", "fleet.yaml"):
        assert _owned(path), path


def _example(pattern: str) -> str:
    """A path under a plan input, as CODEOWNERS must cover it."""
    return (pattern + "any/file") if pattern.endswith("/") else pattern.replace("*", "zz-new")


def test_every_path_the_plan_review_reads_is_owned() -> None:
    # Derived like the review derives what it compares (review.inputs): the planning code and its local
    # dependencies from the pyproject files, the trees Argo CD syncs, the review's machinery.
    inputs = plan_inputs(REPO)
    for must in (
        "platform/review/",
        "platform/contract/",
        "scripts/",
        "requirements/",
        "kustomize/",
        "infra/",
        ".github/",
    ):
        assert must in inputs
    unowned = [p for p in inputs if not _owned(_example(p))]
    assert unowned == []
    for path in ("kustomize/base/image-prepull/daemonset.yaml", "kustomize/components/x/kustomization.yaml"):
        assert _owned(path), path


def test_everything_that_runs_at_plan_or_deploy_time_or_in_a_cluster_is_owned() -> None:
    # Issue 36: platform/gkr/ had no owner, so a safeyaml/ dropped there shadowed the real one at deploy; .ci/ and
    # tests/ (which keep this file and the review's inputs in step) had none either.
    assert {"platform/", ".ci/", "tests/", "fleet.yaml", "scripts/", ".github/"} <= set(owned(REPO))
    unowned = [p for p in owned(REPO) if not _owned(_example(p))]
    assert unowned == []
    for path in (
        "platform/gkr/src/safeyaml/__init__.py",
        "platform/telemetry/setup.py",
        "platform/gkr/examples/pretrain-128-nodes.yaml",
        "platform/trainer/src/trainer/loop/worker.py",
        "tests/test_codeowners.py",
        ".ci/run",
    ):
        assert _owned(path), path
    # Nothing beyond what runs: the top-level README is everyone's.
    assert not _owned("README.md")


def test_every_owner_line_names_an_owner() -> None:
    assert all(owners.startswith("@") for _, owners in _patterns())
