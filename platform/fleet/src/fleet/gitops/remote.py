"""Nothing fetched at render or sync time: kustomizations name local paths, Argo CD sources name commits.

What the review renders must be what Argo CD applies later. A kustomization that names a URL
(`https://host/extra.yaml`) or a git repository (`github.com/org/repo//path?ref=v1`) is fetched
when kustomize builds, so the same commit can render differently tomorrow; an Argo CD source
by tag, branch or chart version is resolved at sync time, and tags and chart versions can be
re-published. Both are refused here, by `meridian generate` (and `--check`) and by the plan
review before it builds anything (fleet.gitops.check.load_cluster).

What kustomize treats as remote, at the version kubectl bundles (kustomize v5.8.1):
api/internal/loader/fileloader.go `Load` fetches any `http://` or `https://` path over HTTP
(resources, patches, generator files alike), and `New` clones whatever
api/internal/git/repospec.go `NewRepoSpecFromURL` parses: a `git::` prefix, the schemes
`https://`, `http://`, `ssh://`, `file://`, an SCP-style `user@host:`, or `github.com/`
without a scheme. The test here is wider (any `scheme://`, any `user@`), never narrower.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import safeyaml
from fleet.gitops.validate import Finding

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")  # kustomize's names, in its order
SCANNED = ("kustomize", "argocd")  # the folders whose kustomizations `meridian generate --check` reads

_SCHEME = re.compile(r"^(git::)?[a-z][a-z0-9+.-]*://", re.IGNORECASE)
_SCP_USER = re.compile(r"^(git::)?[a-z][a-z0-9-]*@", re.IGNORECASE)
_GITHUB = re.compile(r"^(git::)?github\.com[/:]", re.IGNORECASE)
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # a SHA-1 or SHA-256 object name, in full
_DIGEST = re.compile(r"(^|@)sha256:[0-9a-f]{64}$")

# Fields of a Kustomization whose entries kustomize loads by path (api/types/kustomization.go, v5.8.1).
_TREES = ("resources", "bases", "components")  # a file, a folder with a kustomization, or a git repository
_FILES = ("crds", "configurations", "generators", "transformers", "validators", "patchesStrategicMerge")
_PATCH_LISTS = ("patches", "patchesJson6902", "replacements")  # [{path: ...}]
_GENERATORS = ("configMapGenerator", "secretGenerator")  # [{files: [key=path], envs: [path], env: path}]


def is_remote(entry: str) -> bool:
    """Whether kustomize (or Argo CD, for a Helm value file) would fetch `entry` rather than read a local path."""
    entry = entry.strip()
    return bool(_SCHEME.match(entry) or _SCP_USER.match(entry) or _GITHUB.match(entry))


def _paths(doc: dict[str, Any]) -> Iterator[tuple[str, str, bool]]:
    """(where in the file, the path as written, whether it may name a kustomization folder) for every entry
    kustomize loads by path; inline YAML (a patch or a plugin config written in place) is no path."""

    def listed(field: str) -> list[Any]:
        value = doc.get(field)
        return value if isinstance(value, list) else []

    for field in (*_TREES, *_FILES):
        for i, entry in enumerate(listed(field)):
            if isinstance(entry, str) and "\n" not in entry:
                yield f"{field}[{i}]", entry, field in _TREES
    for field in _PATCH_LISTS:
        for i, entry in enumerate(listed(field)):
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                yield f"{field}[{i}].path", entry["path"], False
    for field in _GENERATORS:
        for i, generator in enumerate(listed(field)):
            if not isinstance(generator, dict):
                continue
            for key in ("files", "envs"):
                entries = generator.get(key)
                for j, entry in enumerate(entries if isinstance(entries, list) else []):
                    if isinstance(entry, str):
                        yield f"{field}[{i}].{key}[{j}]", entry.split("=", 1)[-1], False
            if isinstance(generator.get("env"), str):
                yield f"{field}[{i}].env", generator["env"], False
    openapi = doc.get("openapi")
    if isinstance(openapi, dict) and isinstance(openapi.get("path"), str):
        yield "openapi.path", openapi["path"], False


def kustomization_problems(doc: Any) -> tuple[list[str], list[str]]:
    """(problems, local folders to follow) of one parsed kustomization; pure.

    Local entries are returned as written, to be resolved against the kustomization's folder.
    """
    if not isinstance(doc, dict):
        return ["not a Kustomization (a YAML mapping); fix the file"], []
    problems, folders = [], []
    for where, entry, tree in _paths(doc):
        if "\x00" in entry:
            problems.append(f"{where}: holds a NUL character, which no path has; fix the entry")
        elif is_remote(entry):
            problems.append(
                f"{where}: {entry} is fetched when kustomize builds, so what is reviewed is not what Argo CD "
                "applies later; commit what it names into the repository and list its relative path"
            )
        elif tree:
            folders.append(entry)
    charts = doc.get("helmCharts")
    for i, chart in enumerate(charts if isinstance(charts, list) else []):
        if isinstance(chart, dict) and chart.get("repo"):
            problems.append(
                f"helmCharts[{i}]: chart {chart.get('name')} is fetched from {chart['repo']} when kustomize builds; "
                "commit the chart into the repository, or install it as an Argo CD application from git at a commit"
            )
    return problems, folders


def _kustomization(folder: Path) -> Path | None:
    return next((folder / name for name in KUSTOMIZATION_FILES if (folder / name).is_file()), None)


def _inside(repo: Path, path: Path) -> bool:
    """Whether `path`, symbolic links followed, lies in the repository (a link must not take a build elsewhere)."""
    return path.resolve().is_relative_to(repo.resolve())


def _relative(repo: Path, path: Path) -> str:
    """The path as the repository names it (`..` folded, links not followed), for messages."""
    relative = Path(os.path.relpath(os.path.normpath(path), os.path.normpath(repo)))
    return str(path) if relative.parts[:1] == ("..",) else relative.as_posix()


def _check_file(repo: Path, file: Path) -> tuple[list[Finding], list[Path]]:
    """Findings of one kustomization file, and the local folders it names (inside the repository)."""
    where = _relative(repo, file)
    if not _inside(repo, file):  # a link to a file elsewhere: never read it (its text could reach a report)
        return [Finding(where, "is a link to a file outside the repository; replace it with the file")], []
    try:
        doc = safeyaml.load(safeyaml.read_text(file))
    except safeyaml.YamlError as exc:
        return [Finding(f"{where}:{exc.line}", exc.message)], []
    except OSError as exc:
        return [Finding(where, f"cannot read it ({exc.strerror})")], []
    problems, entries = kustomization_problems(doc)
    findings = [Finding(where, p) for p in problems]
    folders = []
    for entry in entries:
        target = file.parent / entry
        if not _inside(repo, target):
            findings.append(Finding(where, f"{entry} lies outside the repository; keep every base inside it"))
        elif target.is_dir():
            folders.append(target)
    return findings, folders


def reachable(repo: Path, folder: Path) -> list[Finding]:
    """Findings of the kustomization in `folder` and of every local base and component it reaches: what
    `kubectl kustomize folder` would read. Call before building, so nothing is fetched."""
    findings: list[Finding] = []
    seen: set[Path] = set()
    todo = [folder]
    while todo:
        current = todo.pop()
        if current.resolve() in seen:
            continue
        seen.add(current.resolve())
        file = _kustomization(current)
        if file is None:
            continue  # a folder of plain manifests: nothing to follow
        found, folders = _check_file(repo, file)
        findings += found
        todo += folders
    return findings


def scan(repo: Path, folders: tuple[str, ...] = SCANNED) -> list[Finding]:
    """Findings of every kustomization file under `folders` of the repository, in path order."""
    files = sorted(
        path
        for top in folders
        if (repo / top).is_dir()
        for name in KUSTOMIZATION_FILES
        for path in (repo / top).rglob(name)
        if path.is_file()
    )
    return [finding for file in files for finding in _check_file(repo, file)[0]]


def source_problem(source: dict[str, Any], own_repo: str) -> str | None:
    """Why an Argo CD Application source can sync something other than what was reviewed, or None.

    The fleet's own repository at its revision (main) is the GitOps design: every change to it passes the
    plan review. Anything else must name content that cannot change: a git commit in full (argo-cd
    docs/user-guide/tracking_strategies.md, "Commit Pinning": a tag can be moved, a commit cannot), an OCI
    source by digest (docs/user-guide/oci.md: targetRevision is a tag or a digest). A Helm chart version can
    be re-published under the same number: refused unless its revision is a digest.
    """
    repo, revision = str(source.get("repoURL", "")), str(source.get("targetRevision") or "HEAD")
    if repo == own_repo:
        problem = None
    elif source.get("chart") or repo.startswith("oci://"):
        what = f"chart {source['chart']}" if source.get("chart") else repo
        problem = (
            None
            if _DIGEST.search(revision)
            else f"{what} at {revision} from {repo} can be re-published under the same version; render it from "
            "git at a full commit SHA or pin an OCI digest (sha256:...)"
        )
    elif not _COMMIT.fullmatch(revision):
        problem = (
            f"{repo} at {revision} is a tag or branch, which can be moved to other content; pin the full commit "
            "SHA the release tag names"
        )
    else:
        problem = None
    if problem is None:
        remote = [f for f in (source.get("helm") or {}).get("valueFiles") or [] if isinstance(f, str) and is_remote(f)]
        remote += [
            c for c in (source.get("kustomize") or {}).get("components") or [] if isinstance(c, str) and is_remote(c)
        ]
        if remote:
            problem = f"{', '.join(remote)} is fetched when Argo CD renders; commit it and name it by path"
    return problem


def application_sources(app: dict[str, Any]) -> list[dict[str, Any]]:
    """An Application's sources: `spec.sources`, or `spec.source` alone."""
    spec = app.get("spec") or {}
    sources = spec.get("sources") or ([spec["source"]] if spec.get("source") else [])
    return [s for s in sources if isinstance(s, dict)]
