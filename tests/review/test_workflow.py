"""The plan review as GitHub runs it: the pull request's code plans its side, the base branch's code decides.

The two workflows are read as GitHub reads them, and their review steps are run
verbatim on throwaway commits of a copy of this repository, with pull requests
that attack the deciding code itself.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.gitops.validate import crd_roots
from review.inputs import changed_inputs, machinery, plan_inputs
from tests.conftest import REPO
from tests.review.conftest import Sandbox, commit, git, regenerate, replace_once, reset

WORKFLOWS = REPO / ".github" / "workflows"
HEAD_HALF, DECIDING_HALF = WORKFLOWS / "plan-review.yml", WORKFLOWS / "plan-review-decide.yml"
RENAME = replace_once("      - name: h200-flex\n", "      - name: h200-flex2\n")
LOST = "us-central1: deletes node pool h200-flex in us-central1-b: 128 nodes, 1,024 H200"


def workflow(path: Path) -> dict[str, Any]:
    data: dict[Any, Any] = yaml.safe_load(path.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads a bare `on` as true
    return data


def steps(path: Path) -> list[dict[str, Any]]:
    (job,) = workflow(path)["jobs"].values()
    result: list[dict[str, Any]] = job["steps"]
    return result


def step(path: Path, name: str) -> dict[str, Any]:
    (found,) = [s for s in steps(path) if s.get("name") == name or s.get("id") == name]
    return found


def test_the_pull_requests_half_has_no_rights_and_runs_for_every_pull_request() -> None:
    data = workflow(HEAD_HALF)
    # Every pull request: no paths or branches filter that a pull request (or a new input) could fall outside.
    assert data["on"] == {"pull_request": None}
    assert data["permissions"] == {"contents": "read"}
    assert "pull_request_target" not in HEAD_HALF.read_text()
    checkout = next(s for s in steps(HEAD_HALF) if s.get("uses", "").startswith("actions/checkout"))
    assert checkout["with"]["persist-credentials"] is False
    assert "scripts/plan_side.py --out plan-review/head-plan.json" in step(HEAD_HALF, "Plan this side")["run"]
    upload = next(s for s in steps(HEAD_HALF) if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["with"]["name"] == "plan-review-head"


def test_the_deciding_half_runs_only_the_base_branchs_code() -> None:
    data = workflow(DECIDING_HALF)
    assert data["on"] == {"workflow_run": {"workflows": [workflow(HEAD_HALF)["name"]], "types": ["completed"]}}
    assert set(data["permissions"]) == {"contents", "actions", "pull-requests", "statuses"}
    checkout = next(s for s in steps(DECIDING_HALF) if s.get("uses", "").startswith("actions/checkout"))
    assert "ref" not in checkout["with"]  # the default branch
    assert checkout["with"]["persist-credentials"] is False
    runs = [s.get("run", "") for s in steps(DECIDING_HALF)]
    # The pull request's tree (pr/) is data: nothing is run from it, no make, no script of its.
    assert not any(token in r for r in runs for token in ("pr/scripts", "pr/.venv", "cd pr", "make -C pr"))
    review = step(DECIDING_HALF, "review")["run"]
    assert ".venv/bin/python scripts/review.py --repo pr " in review
    assert "--head-plan untrusted/head-plan.json" in review
    # The pull request number and merge commit come from the API and git; the artifact's claim is only compared.
    assert "refs/review/merge^2" in step(DECIDING_HALF, "pr")["run"]
    # Labels before the comment; the decision fails unless the comment was posted.
    names = [s.get("id") for s in steps(DECIDING_HALF)]
    assert names.index("labels") < names.index("post")
    decision = step(DECIDING_HALF, "The decision")
    assert decision["if"].startswith("always()")
    assert 'if [ "${{ steps.post.outcome }}" != "success" ]; then state=failure' in decision["run"]
    assert "context=plan-review/decision" in decision["run"]


def test_the_review_reads_what_codeowners_and_the_trigger_cover() -> None:
    inputs = plan_inputs(REPO)
    # The planning code is derived from the pyproject files: the review's own and what it depends on.
    assert {"platform/review/", "platform/fleet/", "platform/contract/", "platform/safeyaml/", "infra/"} <= set(inputs)
    assert "platform/gkr/" not in inputs
    assert {"scripts/", "requirements/", ".github/", "kustomize/", "platform/*/pyproject.toml"} <= set(inputs)
    changed = [
        "platform/contract/src/contract/names.py",
        "platform/zz-lint/pyproject.toml",
        "scripts/review.py",
        "platform/gkr/README.md",
        "kustomize/base/image-prepull/daemonset.yaml",
    ]
    assert changed_inputs(inputs, changed) == [c for c in changed if c != "platform/gkr/README.md"]
    assert machinery(changed) == ["platform/zz-lint/pyproject.toml", "scripts/review.py"]


# --- the workflow's steps, verbatim, on throwaway commits ---------------------------------------------------


def run_step(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    (cwd.parent / "step.sh").write_text(script)
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(cwd.parent / "step.sh")],  # GitHub's `bash` shell
        cwd=cwd,
        env={**os.environ, **env, "MERIDIAN_CRDS": os.pathsep.join(map(str, crd_roots(REPO)))},
        capture_output=True,
        text=True,
        check=False,
    )


def as_github_runs_it(repo: Path, base: str) -> tuple[dict[str, str], Path]:
    """The pull request's half in `repo` (HEAD), then the deciding half in a checkout of `base` with the
    pull request's tree at pr/; returns the review step's outputs and the deciding checkout."""
    (repo / ".venv").unlink(missing_ok=True)
    (repo / ".venv").symlink_to(REPO / ".venv")  # `make setup` in each job
    head_half = run_step(step(HEAD_HALF, "Plan this side")["run"], repo, {})
    assert head_half.returncode == 0, head_half.stderr
    assert (repo / "plan-review/exit").read_text().strip() == "0", (repo / "plan-review/error.txt").read_text()
    trusted = repo.parent / "trusted"
    git(repo, "worktree", "add", "-q", "--detach", str(trusted), base)
    (trusted / ".venv").symlink_to(REPO / ".venv")
    git(trusted, "worktree", "add", "-q", "--detach", "pr", git(repo, "rev-parse", "HEAD"))
    (trusted / "untrusted").mkdir()
    (trusted / "untrusted/head-plan.json").write_bytes((repo / "plan-review/head-plan.json").read_bytes())
    output = trusted.parent / "github_output"
    output.write_text("")
    script = step(DECIDING_HALF, "review")["run"].replace("${{ steps.pr.outputs.base }}", base)
    assert "${{" not in script, script
    result = run_step(script, trusted, {"GITHUB_OUTPUT": str(output), "RUN_URL": "https://ci.example/run/1"})
    assert result.returncode == 0, result.stdout + result.stderr  # `set +e`: the step itself never fails
    return dict(line.split("=", 1) for line in output.read_text().splitlines()), trusted


@pytest.fixture
def attempt(sandbox: Sandbox) -> Any:
    repo, base, _ = sandbox
    reset(repo, base)
    yield repo, base
    for tree in ("trusted/pr", "trusted"):
        subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(repo.parent / tree)], check=False)
    git(repo, "worktree", "prune")


def test_a_pull_request_that_rewrites_the_review_script_is_still_judged_by_bases(attempt: Any) -> None:
    repo, base = attempt
    regenerate(repo, RENAME)
    # The attacker's review: says all is well and exits 0.
    (repo / "scripts/review.py").write_text(
        'import sys\nopen("review.md", "w").write("No destructive change.\\n")\nsys.exit(0)\n'
    )
    commit(repo, "rename a pool; a friendlier review")
    outputs, trusted = as_github_runs_it(repo, base)
    assert outputs == {"exit": "3"}
    assert (trusted / "labels.txt").read_text().splitlines() == ["destructive", "security"]
    comment = (trusted / "comment.md").read_text()
    assert LOST in comment
    # Reported first, above the destructive change.
    assert comment.index("`scripts/review.py`") < comment.index(LOST)
    assert "Review machinery changed" in comment


def test_a_new_folder_redefining_the_review_command_changes_nothing(attempt: Any) -> None:
    repo, base = attempt
    regenerate(repo, RENAME)
    lint = repo / "platform/zz-lint"
    (lint / "src/zz").mkdir(parents=True)
    (lint / "pyproject.toml").write_text(
        '[project]\nname = "zz-lint"\n[project.scripts]\nmeridian-review = "zz.cli:main"\n'
        '[tool.setuptools.packages.find]\nwhere = ["src"]\n'
    )
    (lint / "src/zz/__init__.py").write_text("")
    (lint / "src/zz/cli.py").write_text('def main():\n    print("No destructive change.")\n    return 0\n')
    commit(repo, "rename a pool; a lint folder")
    outputs, trusted = as_github_runs_it(repo, base)
    assert outputs == {"exit": "3"}
    comment = (trusted / "comment.md").read_text()
    assert LOST in comment
    assert "`platform/zz-lint/pyproject.toml`" in comment
