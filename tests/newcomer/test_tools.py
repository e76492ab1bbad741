"""Entry points that must not depend on what the machine has on PATH, or on credentials being there."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from fleet.cli import main as meridian
from tests.conftest import REPO
from tests.newcomer.checkout import hidden_path


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("bare")
    (base / "home").mkdir()
    return {"PATH": hidden_path(base / "bin"), "HOME": str(base / "home"), "LANG": "C.UTF-8"}


def run(args: list[str], env: dict[str, str], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_the_bare_path_has_none_of_the_projects_tools(bare: dict[str, str]) -> None:
    for tool in ("node", "kubectl", "terraform", "cdktn", "gcloud"):
        assert run(["sh", "-c", f"command -v {tool}"], bare).returncode != 0, tool


@pytest.mark.scenario
def test_make_help_lists_every_target(bare: dict[str, str], tmp_path: Path) -> None:
    makefile = (REPO / "Makefile").read_text()
    targets = re.findall(r"^([a-z][a-z-]*):", makefile, re.M)
    (tmp_path / "Makefile").write_text(makefile)  # a folder without .venv: help must build nothing
    for args in (["make", "help"], ["make"]):
        result = run(args, bare, tmp_path)
        assert result.returncode == 0, result.stderr
        listed = {line.split()[0]: line.split(None, 1)[1] for line in result.stdout.splitlines()}
        assert sorted(listed) == sorted(targets)
        assert all(listed.values())
    assert not (tmp_path / ".venv").exists()


def test_cdktn_wrapper_runs_the_projects_node(bare: dict[str, str], tmp_path: Path) -> None:
    # bootstrap.sh writes .venv/bin/cdktn this way; here into a folder of its own.
    assert "scripts/cdktn --install-wrapper .venv/bin" in (REPO / "scripts" / "bootstrap.sh").read_text()
    assert run([str(REPO / "scripts" / "cdktn"), "--install-wrapper", str(tmp_path)], bare).returncode == 0
    result = run([str(tmp_path / "cdktn"), "--version"], bare, tmp_path)
    assert (result.returncode, result.stdout.strip()) == (0, "0.24.0"), result.stderr


PINNED_TERRAFORM = (REPO / "infra" / ".terraform-version").read_text().strip()


@pytest.fixture
def with_terraform(bare: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The bare PATH plus a `terraform` that says it is the pinned version (it is never asked to do more here)."""
    stub = tmp_path / "tf-bin" / "terraform"
    stub.parent.mkdir()
    stub.write_text(f"#!/bin/sh\necho 'Terraform v{PINNED_TERRAFORM}'\n")
    stub.chmod(0o755)
    return {**bare, "PATH": f"{stub.parent}:{bare['PATH']}"}


@pytest.mark.parametrize("command", [["diff", "us-central1"], ["deploy", "global"], ["destroy", "us-east4"]])
def test_cdktn_without_terraform_is_one_line(bare: dict[str, str], tmp_path: Path, command: list[str]) -> None:
    """Checked before credentials: a local tool first, then the account (with credentials here, to show it)."""
    key = tmp_path / "key.json"
    key.write_text("{}")
    result = run([str(REPO / "scripts" / "cdktn"), *command], {**bare, "GOOGLE_APPLICATION_CREDENTIALS": str(key)})
    assert result.returncode == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert f"Terraform {PINNED_TERRAFORM}" in line
    assert "infra/.terraform-version" in line
    assert "developer.hashicorp.com/terraform/install" in line


def test_cdktn_without_either_names_terraform_first(bare: dict[str, str]) -> None:
    result = run([str(REPO / "scripts" / "cdktn"), "diff", "us-central1"], bare)
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert f"Terraform {PINNED_TERRAFORM}" in line


def test_terraform_is_pinned_in_one_place() -> None:
    assert re.fullmatch(r"1\.\d+\.\d+", PINNED_TERRAFORM)
    for readme in ("README.md", "infra/README.md"):
        assert f"Terraform {PINNED_TERRAFORM}" in (REPO / readme).read_text(), readme


@pytest.mark.parametrize("command", [["diff", "us-central1"], ["deploy", "global"], ["destroy", "us-east4"]])
def test_cdktn_without_credentials_is_one_line(with_terraform: dict[str, str], command: list[str]) -> None:
    result = run([str(REPO / "scripts" / "cdktn"), *command], with_terraform)  # HOME is empty: no gcloud config
    assert result.returncode == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert "`gcloud auth application-default login`" in line


def test_cdktn_with_credentials_goes_on(bare: dict[str, str], tmp_path: Path) -> None:
    key = tmp_path / "key.json"
    key.write_text("{}")
    result = run(
        [str(REPO / "scripts" / "cdktn"), "deploy", "--help"], {**bare, "GOOGLE_APPLICATION_CREDENTIALS": str(key)}
    )
    assert result.returncode == 0, result.stderr
    assert "application-default" not in result.stderr


def test_plan_objects_without_kubectl_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))  # no kubectl beside it
    monkeypatch.setenv("PATH", str(tmp_path))
    assert meridian(["plan", "--objects", "--fleet", str(REPO / "fleet.yaml")]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    assert "`make setup`" in line


def test_bootstrap_argocd_uses_the_projects_kubectl(bare: dict[str, str]) -> None:
    env = {**bare, "PYTHONPATH": str(REPO / "platform" / "fleet" / "src")}
    result = run([sys.executable, "scripts/bootstrap_argocd.py", "meridian-us-central1", "--dry-run"], env)
    assert result.returncode == 0, result.stderr
    commands = [line.split()[1] for line in result.stdout.splitlines()]
    assert set(commands) == {"gcloud", str(REPO.resolve() / ".venv" / "bin" / "kubectl")}


def test_train_py_runs_from_a_checkout_with_the_machines_python(bare: dict[str, str]) -> None:
    result = run(["python3", "platform/trainer/train.py", "--help"], bare)  # /usr/bin's, not .venv's
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: train.py")
