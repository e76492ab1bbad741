"""Nothing fetched at render or sync time: remote kustomize entries and movable Argo CD sources are refused.

Issue 36's attempt: a remote resource in kustomize/base/warden/kustomization.yaml was reviewed as whatever the
URL served that day (a ConfigMap), and rendered later as whatever it served then (a ClusterRoleBinding).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from fleet.cli import main as meridian
from fleet.gitops.check import load_cluster
from fleet.gitops.remote import is_remote, kustomization_problems, source_problem
from tests.conftest import REPO, SHIPPED
from tests.gitops.conftest import KUBECTL

WARDEN_BASE = "kustomize/base/warden/kustomization.yaml"
OWN = "https://github.com/meridian-ml/meridian.git"
COMMIT = "8eab68778fc1b52affe165fdf5af29d1e9b4f3cb"


def _checkout(tmp_path: Path, remote: str) -> Path:
    """The committed kustomize/, argocd/ and generated/ trees with `remote` added to Warden's base resources."""
    root = tmp_path / "repo"
    for folder in ("kustomize", "argocd", "generated"):
        shutil.copytree(REPO / folder, root / folder)
    base = root / WARDEN_BASE
    base.write_text(base.read_text().replace("  - networkpolicy.yaml\n", f"  - networkpolicy.yaml\n  - {remote}\n"))
    return root


@pytest.mark.parametrize(
    "entry",
    [
        "http://attacker.example/warden-extra.yaml",
        "HTTPS://attacker.example/x.yaml",
        "github.com/org/repo//deploy?ref=v1",
        "GitHub.com:org/repo",
        "git@github.com:org/repo.git//deploy",
        "git::https://gitlab.example/org/repo",
        "ssh://git@host/org/repo",
        "file:///etc",
    ],
)
def test_what_kustomize_would_fetch_or_clone_is_remote(entry: str) -> None:
    assert is_remote(entry)
    problems, folders = kustomization_problems({"resources": ["deployment.yaml", entry]})
    assert folders == ["deployment.yaml"]  # the local entry, followed when it is a folder
    assert len(problems) == 1
    assert problems[0].startswith(f"resources[1]: {entry} is fetched when kustomize builds")


@pytest.mark.parametrize("entry", ["deployment.yaml", "../../../base/warden", "github.com.yaml", "./rbac.yaml"])
def test_local_paths_are_not_remote(entry: str) -> None:
    assert not is_remote(entry)


def test_every_field_kustomize_loads_by_path_is_read() -> None:
    doc: dict[str, Any] = {
        "bases": ["github.com/org/repo"],
        "components": ["https://example.com/c"],
        "patches": [{"path": "https://example.com/p.yaml"}, {"patch": "kind: X\nmetadata: {name: https://a}\n"}],
        "configMapGenerator": [{"name": "c", "files": ["k=https://example.com/f"], "envs": ["local.env"]}],
        "openapi": {"path": "http://example.com/schema.json"},
        "helmCharts": [{"name": "evil", "repo": "https://charts.example.com"}],
    }
    problems, _ = kustomization_problems(doc)
    assert [p.split(":", 1)[0] for p in problems] == [
        "bases[0]",
        "components[0]",
        "patches[0].path",
        "configMapGenerator[0].files[0]",
        "openapi.path",
        "helmCharts[0]",
    ]  # an inline patch is no path, whatever it holds


def test_generate_check_refuses_a_remote_resource_in_one_line_naming_the_file(
    tmp_path: Path, served: tuple[str, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, asked = served
    root = _checkout(tmp_path, url)
    before = sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))
    for check in (["--check"], []):
        assert meridian(["generate", "--fleet", str(SHIPPED), "--root", str(root), *check]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            f"error: {WARDEN_BASE}: resources[7]: {url} is fetched when kustomize builds, so what is reviewed is "
            "not what Argo CD applies later; commit what it names into the repository and list its relative path"
        ]
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == before  # nothing written
    assert asked == []


def test_the_reviews_rendering_refuses_it_before_anything_is_fetched(
    tmp_path: Path, served: tuple[str, list[str]]
) -> None:
    # load_cluster is what the plan review's deciding side renders each side with (review.snapshot.take).
    url, asked = served
    root = _checkout(tmp_path, url)
    tree, findings = load_cluster(root, "meridian-us-east4", KUBECTL)
    assert [str(f) for f in findings] == [
        f"{WARDEN_BASE}: resources[7]: {url} is fetched when kustomize builds, so what is reviewed is not what "
        "Argo CD applies later; commit what it names into the repository and list its relative path"
    ]
    assert "warden" not in tree.apps  # not built
    assert asked == []  # and nothing asked of the server


def test_a_base_that_leaves_the_repository_is_refused(tmp_path: Path) -> None:
    root = _checkout(tmp_path, "../../../../outside")
    (tmp_path / "outside").mkdir()
    _, findings = load_cluster(root, "meridian-us-east4", KUBECTL)
    assert [str(f) for f in findings] == [
        f"{WARDEN_BASE}: ../../../../outside lies outside the repository; keep every base inside it"
    ]


@pytest.mark.parametrize(
    ("source", "refused"),
    [
        ({"repoURL": OWN, "targetRevision": "main", "path": "kustomize/overlays/x/teams"}, ""),
        ({"repoURL": "https://github.com/o/r.git", "targetRevision": COMMIT, "path": "p"}, ""),
        ({"repoURL": "https://github.com/o/r.git", "targetRevision": "v1.7.0", "path": "p"}, "is a tag or branch"),
        ({"repoURL": "https://github.com/o/r.git", "path": "p"}, "at HEAD is a tag or branch"),
        ({"repoURL": "https://github.com/o/r.git", "targetRevision": COMMIT[:12], "path": "p"}, "is a tag or branch"),
        ({"repoURL": "registry.k8s.io/kueue/charts", "chart": "kueue", "targetRevision": "0.19.2"}, "re-published"),
        ({"repoURL": "https://ray-project.github.io/kuberay-helm/", "chart": "k", "targetRevision": "1.7.0"}, "re-"),
        ({"repoURL": "oci://registry.example/charts/kueue", "targetRevision": "0.19.2", "path": "."}, "re-published"),
        ({"repoURL": "oci://registry.example/charts/kueue", "targetRevision": "sha256:" + "a" * 64, "path": "."}, ""),
        (
            {
                "repoURL": "https://github.com/o/r.git",
                "targetRevision": COMMIT,
                "path": "c",
                "helm": {"valueFiles": ["https://example.com/values.yaml"]},
            },
            "is fetched when Argo CD renders",
        ),
    ],
)
def test_argo_cd_sources_must_name_what_cannot_move(source: dict[str, Any], refused: str) -> None:
    problem = source_problem(source, OWN)
    assert (problem is None) if not refused else (problem is not None and refused in problem)


def test_hostile_kustomizations_end_in_a_finding_not_a_crash(tmp_path: Path) -> None:
    problems, _ = kustomization_problems(
        {"helmCharts": 5, "configMapGenerator": [{"files": 7}, "x"], "resources": ["a\x00b", 3], "openapi": []}
    )
    assert problems == ["resources[0]: holds a NUL character, which no path has; fix the entry"]
    assert kustomization_problems(["not", "a", "mapping"])[0] == ["not a Kustomization (a YAML mapping); fix the file"]
    root = _checkout(tmp_path, "rbac.yaml")
    secret = tmp_path / "secret.yaml"
    secret.write_text("resources: [https://example.com/x]\n")
    (root / WARDEN_BASE).unlink()
    (root / WARDEN_BASE).symlink_to(secret)
    _, findings = load_cluster(root, "meridian-us-east4", KUBECTL)
    assert [str(f) for f in findings] == [
        f"{WARDEN_BASE}: is a link to a file outside the repository; replace it with the file"
    ]
