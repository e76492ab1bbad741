"""A clone that stands alone: no ../shared, no $MERIDIAN_CRDS; `make setup` gets the pinned CRDs or says why not.

The copy's upstream is a local server (this machine reaches no GitHub) named by MERIDIAN_CRDS_BASE_URL, the
override only tests use; every byte it serves is checked against requirements/crds.lock.json all the same.
After `make setup` the copy runs the CRD-reading half of `make plan` (`meridian plan --objects`: the
registry's schemas and every cluster's tree); the other half, synthesis, reads no CRD and the README test
runs it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.gitops.upstream_crds import closed_port_url, committed_lock, shared_crds, upstream
from tests.newcomer.checkout import copy_checkout, environment, hidden_path, rebuilds_venv

BASE_URL = "MERIDIAN_CRDS_BASE_URL"


@pytest.fixture
def clone(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    root = copy_checkout(tmp_path / "meridian")
    (tmp_path / "home").mkdir()
    env = environment(root, hidden_path(tmp_path / "bin"), tmp_path / "home")
    del env["MERIDIAN_CRDS"]  # nothing provided: tmp_path holds no shared/ beside the copy
    assert not (tmp_path / "shared").exists()
    return root, env


def _run(root: Path, command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    assert not rebuilds_venv(root, command, env), f"{command} would rebuild .venv: refusing to run it"
    return subprocess.run(
        ["bash", "-c", command], cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.scenario
def test_make_setup_gets_the_pinned_crds_and_plan_reads_them(clone: tuple[Path, dict[str, str]]) -> None:
    root, env = clone
    lock = committed_lock()
    with upstream() as served:
        setup = _run(root, "make setup", {**env, BASE_URL: served.base})
        assert setup.returncode == 0, setup.stderr
        assert f"{len(lock.files)} downloaded into it" in setup.stdout
        assert len(served.asked) == len(lock.files)
        cache = root / ".cache" / "crds"
        assert all((cache / c.path).read_bytes() == (shared_crds() / c.path).read_bytes() for c in lock.files)
        again = _run(root, "make -s crds", {**env, BASE_URL: served.base})
        assert f"{len(lock.files)} already in .cache/crds, 0 downloaded" in again.stdout
        assert len(served.asked) == len(lock.files)
    plan = _run(root, ".venv/bin/meridian plan --objects --fleet fleet.yaml", env)
    assert plan.returncode == 0, plan.stderr
    assert "Argo CD, per cluster" in plan.stdout


@pytest.mark.scenario
@pytest.mark.parametrize("command", ["make setup", "make plan"])
def test_without_a_network_setup_and_plan_say_in_one_line_what_is_missing(
    clone: tuple[Path, dict[str, str]], command: str
) -> None:
    root, env = clone
    result = _run(root, command, {**env, BASE_URL: closed_port_url()})
    assert result.returncode == 2  # make's own exit code for a failed recipe; the script's is 2 too
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    assert "cannot download" in errors[0]
    assert "run `make setup` where raw.githubusercontent.com is reachable, or put them in ../shared/crds" in errors[0]
    assert "Traceback" not in result.stderr
    assert "synthesized" not in result.stdout  # make stopped before planning
    assert not (root / ".cache").exists()
