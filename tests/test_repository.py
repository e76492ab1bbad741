"""The repository keeps its promises: layout, a lock that matches its inputs, CI that runs the tests."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO


def test_layout_from_the_design() -> None:
    for path in (
        "fleet.yaml",
        "infra",
        "platform/fleet",
        "kustomize",
        "argocd",
        "scripts",
        "tests",
        "README.md",
        "docs/architecture.md",
        "Makefile",
        ".ci/run",
    ):
        assert (REPO / path).exists(), path


def test_lock_pins_every_direct_dependency_with_hashes() -> None:
    wanted = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", (REPO / "requirements/dev.in").read_text(), re.M))
    lock = (REPO / "requirements/dev.lock").read_text()
    pinned = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) \\$", lock, re.M))
    for name, version in wanted.items():
        assert pinned.get(name.lower()) == version, f"{name}: run make lock"
    # Every locked package carries at least one hash, so pip runs in --require-hashes mode.
    blocks = re.split(r"\n(?=[a-z0-9])", lock.split("\n", 6)[-1])
    assert all("--hash=sha256:" in block for block in blocks if "==" in block)


def test_the_readme_points_at_the_architecture_in_this_repository() -> None:
    """A clone stands alone: the architecture the code relies on is described here, not in a sibling folder."""
    readme = (REPO / "README.md").read_text()
    assert "](docs/architecture.md)" in readme
    assert "../shared/DESIGN.md" not in readme


def test_ci_runs_the_readme_test_command() -> None:
    readme = (REPO / "README.md").read_text()
    assert "make test" in readme
    ci = (REPO / ".ci/run").read_text()
    assert "set -euo pipefail" in ci
    assert re.search(r"^make test$", ci, re.M)


def test_every_component_is_its_own_distribution() -> None:
    components = sorted(p.parent.name for p in (REPO / "platform").glob("*/pyproject.toml"))
    assert "fleet" in components
    # Never a package named `platform`: it would shadow the standard library module.
    assert not (REPO / "platform/__init__.py").exists()


def test_toolchains_of_later_stages_come_from_the_environment() -> None:
    import subprocess
    import sys

    bin_dir = Path(sys.executable).parent
    node = subprocess.run([bin_dir / "node", "--version"], capture_output=True, text=True, check=True).stdout
    major, minor = (int(x) for x in node.strip().lstrip("v").split(".")[:2])
    assert (major, minor) >= (22, 19)  # what the CDK Terrain CLI needs
    kubectl = subprocess.run(
        [bin_dir / "kubectl", "version", "--client"], capture_output=True, text=True, check=True
    ).stdout
    assert "v1.37" in kubectl
