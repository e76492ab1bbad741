"""The review's sandbox: a git repository holding this repository's tracked files, shared by the scenario tests."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from fleet.cli import main as meridian
from review.cli import main as review_main
from review.review import BaseCache, Review, review
from tests.conftest import REPO

KUBECTL = str(Path(sys.executable).parent / "kubectl")
Sandbox = tuple[Path, str, BaseCache]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Sandbox:
    """A git repository holding this repository's tracked files, committed once as the base."""
    repo = tmp_path_factory.mktemp("review") / "repo"
    for rel in git(REPO, "ls-files").splitlines():
        if (REPO / rel).is_file():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, repo / rel)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "-c", "user.email=t@example.com", "-c", "user.name=t", "add", "-A")
    git(repo, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "base")
    return repo, git(repo, "rev-parse", "HEAD"), {}


def reset(repo: Path, base: str) -> None:
    git(repo, "reset", "-q", "--hard", base)
    git(repo, "clean", "-qfdx", "-e", ".venv")


def at_base(sandbox: Sandbox) -> tuple[Path, str]:
    """The sandbox back at its base commit with nothing else in the tree: (repo, base)."""
    repo, base, _ = sandbox
    reset(repo, base)
    return repo, base


def review_cli(repo: Path, base: str, out: Path, *extra: str) -> int:
    """The review's command line on the sandbox, HEAD against `base`, the report written to `out`."""
    return review_main(["--base", base, "--repo", str(repo), "--out", str(out), "--kubectl", KUBECTL, *extra])


def regenerate(repo: Path, edit: Callable[[str], str]) -> None:
    """Edit the sandbox's fleet.yaml and regenerate what derives from it, as `make generate` does."""
    spec = repo / "fleet.yaml"
    spec.write_text(edit(spec.read_text()))
    assert meridian(["generate", "--fleet", str(spec), "--root", str(repo)]) == 0


def commit(repo: Path, message: str = "change") -> None:
    git(repo, "add", "-A")
    git(repo, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", message)


def scenario(sandbox: Sandbox, edit: Callable[[str], str]) -> Review:
    repo, base, cache = sandbox
    reset(repo, base)
    regenerate(repo, edit)
    commit(repo)
    return review(repo, base, kubectl=KUBECTL, cache=cache)


def replace_once(old: str, new: str) -> Callable[[str], str]:
    def edit(text: str) -> str:
        assert text.count(old) == 1, old
        return text.replace(old, new)

    return edit
