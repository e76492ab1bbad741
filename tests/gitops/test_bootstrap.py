"""Bootstrap of a cluster's Argo CD, and where pinned CRDs come from without ../shared."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fleet.gitops.bootstrap import bootstrap_commands
from fleet.gitops.crd_sources import crd_sources
from fleet.gitops.validate import crd_roots
from fleet.model import Fleet
from tests.conftest import REPO


def test_bootstrap_installs_pinned_argocd_then_the_root(fleet: Fleet) -> None:
    commands = bootstrap_commands(fleet, fleet.regions[1])
    assert commands[0][:5] == ["gcloud", "container", "clusters", "get-credentials", "meridian-us-east4"]
    assert "--dns-endpoint" in commands[0]
    install = commands[2]
    # The commit tag v3.5.1 names: a tag could be moved before a bootstrap.
    assert install[-1] == (
        "https://github.com/argoproj/argo-cd//manifests/cluster-install?ref=109ca7ca71139e514114499d294a492e7910a965"
    )
    assert "--server-side" in install
    root = commands[-1][-1]
    assert root == "argocd/clusters/meridian-us-east4/root.yaml"
    assert (REPO / root).is_file()


def test_bootstrap_script_dry_run_and_bad_cluster() -> None:
    script = REPO / "scripts" / "bootstrap_argocd.py"
    ok = subprocess.run(
        [sys.executable, script, "meridian-europe-west1", "--dry-run"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.count("\n+ ") + ok.stdout.startswith("+ ") == 6
    bad = subprocess.run(
        [sys.executable, script, "meridian-mars1", "--dry-run"], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: no cluster 'meridian-mars1' in fleet.yaml; use one of meridian-us-central1")


def test_crd_sources_cover_exactly_the_pinned_crds(fleet: Fleet) -> None:
    shared = next(root for root in crd_roots(REPO) if root.name == "crds" and root.parent.name == "shared")
    wanted = {relative for relative, _ in crd_sources(fleet)}
    present = {p.relative_to(shared).as_posix() for p in Path(shared).rglob("*.yaml")} if shared.is_dir() else set()
    pinned = {
        p
        for p in present
        if p.split("/")[0] in {"kuberay", "kueue", "argo-cd", "gke-networking-api", "prometheus-engine"}
    }
    assert wanted == pinned
    assert all(
        url.startswith("https://raw.githubusercontent.com/") and url.endswith(rel.rsplit("/", 1)[1])
        for rel, url in crd_sources(fleet)
    )
