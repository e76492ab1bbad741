"""The plan review as GitHub runs it: the pull request's code plans its side, the base branch's code decides.

The two workflows are read as GitHub reads them, and their review steps are run
verbatim on throwaway commits of a copy of this repository, with pull requests
that attack the deciding code itself.
"""

from __future__ import annotations

import json
import os
import shutil
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
TRIGGER, DECIDING = WORKFLOWS / "plan-review.yml", WORKFLOWS / "plan-review-decide.yml"
RENAME = replace_once("      - name: h200-flex\n", "      - name: h200-flex2\n")
LOST = "us-central1: deletes node pool h200-flex in us-central1-b: 128 nodes, 1,024 H200"


def workflow(path: Path) -> dict[str, Any]:
    data: dict[Any, Any] = yaml.safe_load(path.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads a bare `on` as true
    return data


def steps(path: Path, job: str | None = None) -> list[dict[str, Any]]:
    jobs = workflow(path)["jobs"]
    result: list[dict[str, Any]] = jobs[job]["steps"] if job else next(iter(jobs.values()))["steps"]
    return result


def step(path: Path, name: str, job: str | None = None) -> dict[str, Any]:
    (found,) = [s for s in steps(path, job) if s.get("name") == name or s.get("id") == name]
    return found


def uses(path: Path, job: str, action: str) -> list[dict[str, Any]]:
    return [s for s in steps(path, job) if s.get("uses", "").startswith(action)]


def test_the_pull_requests_own_workflow_runs_nothing_and_holds_nothing() -> None:
    # It runs as the pull request has it, so nothing in it may matter: no checkout, no code, no token.
    data = workflow(TRIGGER)
    assert data["on"] == {"pull_request": None}  # every pull request: no filter a change could fall outside
    assert data["permissions"] == {}
    assert "pull_request_target" not in TRIGGER.read_text()
    (only,) = steps(TRIGGER)
    assert set(only) == {"name", "run"}
    assert not any(word in only["run"] for word in ("make", "python", "scripts/", "pip", "checkout"))


def test_the_pull_request_is_planned_in_the_default_branchs_environment_without_write_rights() -> None:
    data = workflow(DECIDING)
    assert data["on"] == {"workflow_run": {"workflows": [workflow(TRIGGER)["name"]], "types": ["completed"]}}
    assert data["permissions"] == {}
    jobs = data["jobs"]
    assert jobs["plan"]["permissions"] == {"contents": "read"}  # no token that can write; no secret is named
    assert "secrets." not in yaml.safe_dump(jobs["plan"])
    plan = steps(DECIDING, "plan")
    checkouts = uses(DECIDING, "plan", "actions/checkout")
    # First the default branch (no ref) and its environment; only then the merge commit, as files in pr/.
    assert "ref" not in checkouts[0]["with"]
    assert checkouts[1]["with"] == {
        "ref": "${{ needs.find.outputs.merge }}",
        "path": "pr",
        "persist-credentials": False,
    }
    assert all(c["with"]["persist-credentials"] is False for c in checkouts)
    names = [s.get("name") or s.get("uses") for s in plan]
    assert names.index("Build .venv") < plan.index(checkouts[1])
    # Nothing installs from, or runs a script of, the pull request's tree: its build hooks never run.
    runs = [s.get("run", "") for s in plan]
    assert not any(t in r for r in runs for t in ("make -C pr", "cd pr", "pr/scripts", "pr/.venv", "pip ", "-e pr"))
    assert not any("working-directory" in s for s in plan)
    assert (
        ".venv/bin/python scripts/plan_side.py --checkout pr --out plan-review/head-plan.json"
        in (step(DECIDING, "Plan the pull request", "plan")["run"])
    )
    # No cache anywhere: a job in the default branch's context could poison it for the others.
    for path in WORKFLOWS.glob("*.y*ml"):
        text = path.read_text()
        assert "actions/cache" not in text, path
        assert not any("cache" in (s.get("with") or {}) for j in workflow(path)["jobs"].values() for s in j["steps"])


def test_the_deciding_job_runs_only_the_base_branchs_code() -> None:
    jobs = workflow(DECIDING)["jobs"]
    assert jobs["decide"]["permissions"] == {"contents": "read", "pull-requests": "write", "statuses": "write"}
    assert jobs["decide"]["needs"] == ["find", "plan"]
    checkout = uses(DECIDING, "decide", "actions/checkout")[0]
    assert "ref" not in checkout["with"]  # the default branch
    assert checkout["with"]["persist-credentials"] is False
    runs = [s.get("run", "") for s in steps(DECIDING, "decide")]
    # The pull request's tree (pr/) is data: nothing is run from it, no make, no script of its.
    assert not any(token in r for r in runs for token in ("pr/scripts", "pr/.venv", "cd pr", "make -C pr"))
    review = step(DECIDING, "review", "decide")["run"]
    assert ".venv/bin/python scripts/review.py --repo pr " in review
    assert "--head-plan untrusted/head-plan.json" in review
    assert "--reviewed reviewed.json" in review  # the record the deploy checks
    record = step(DECIDING, "The reviewed plan's digests", "decide")
    assert record["with"] == {"name": "plan-review-reviewed", "path": "reviewed.json", "retention-days": 90}
    # The pull request number and merge commit come from the API and git.
    assert "refs/review/merge^2" in step(DECIDING, "pr", "find")["run"]
    # Labels before the comment; the decision fails unless the comment was posted.
    names = [s.get("id") for s in steps(DECIDING, "decide")]
    assert names.index("labels") < names.index("post")
    decision = step(DECIDING, "The decision", "decide")
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


def as_github_runs_it(repo: Path, base: str, env: dict[str, str] | None = None) -> tuple[dict[str, str], Path]:
    """plan-review-decide.yml's plan and decide jobs on `repo`'s HEAD (the merge commit) against `base`: a
    checkout of `base` (the default branch) with its environment, the merge commit at pr/; returns the review
    step's outputs and the checkout."""
    trusted = repo.parent / "trusted"
    git(repo, "worktree", "add", "-q", "--detach", str(trusted), base)
    (trusted / ".venv").symlink_to(REPO / ".venv")  # `make setup` of the default branch
    merge = git(repo, "rev-parse", "HEAD")
    git(trusted, "worktree", "add", "-q", "--detach", "pr", merge)  # actions/checkout with path: pr
    plan = step(DECIDING, "Plan the pull request", "plan")["run"].replace("${{ needs.find.outputs.merge }}", merge)
    assert "${{" not in plan, plan
    planned = run_step(plan, trusted, env or {})
    assert planned.returncode == 0, planned.stderr  # `set +e`: the step itself never fails
    shutil.copytree(trusted / "plan-review", trusted / "untrusted")  # the artifact, downloaded by `decide`
    output = trusted.parent / "github_output"
    output.write_text("")
    script = step(DECIDING, "review", "decide")["run"].replace("${{ needs.find.outputs.base }}", base)
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


@pytest.mark.scenario
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


@pytest.mark.scenario
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


CUT = (  # issue 36's forged plan: us-east4's h200-a 384 -> 1 node in the pools' code
    "infra/meridian_infra/gpu_pools.py",
    "node_count=None if flex else pool.nodes,",
    "node_count=None if flex else {384: 1}.get(pool.nodes, pool.nodes),",
)
CUT_LINE = "us-east4: node pool h200-a in us-east4-b: 384 nodes, 3,072 H200 -> 1 node, 8 H200 (-3,064 H200)"


@pytest.mark.scenario
def test_a_build_hook_of_the_pull_request_never_runs_before_its_plan_is_taken(attempt: Any) -> None:
    # Issue 36: a setup.py that, in GitHub, put BASE's infra code back during the plan job's `make setup`:
    # "nothing flagged" for -3,064 H200. Now the plan job's environment is the default branch's.
    repo, base = attempt
    path, old, new = CUT
    (repo / path).write_text(replace_once(old, new)((repo / path).read_text()))
    ran = repo.parent / "hook-ran"
    (repo / "platform/telemetry/setup.py").write_text(
        "import os, subprocess\n"
        "if os.environ.get('GITHUB_ACTIONS') == 'true':\n"
        "    subprocess.run(['git', 'checkout', 'HEAD^1', '--', 'infra/meridian_infra'], check=False)\n"
        f"open({str(ran)!r}, 'w').close()\n"
        "from setuptools import setup\nsetup()\n"
    )
    commit(repo, "cut us-east4; a build hook")
    outputs, trusted = as_github_runs_it(repo, base, {"GITHUB_ACTIONS": "true"})
    assert not ran.exists()
    assert outputs == {"exit": "3"}
    assert (trusted / "labels.txt").read_text().splitlines() == ["destructive", "security"]
    comment = (trusted / "comment.md").read_text()
    assert CUT_LINE in comment
    assert comment.index("`platform/telemetry/setup.py`") < comment.index(CUT_LINE)  # machinery, first
    # What the decision recorded for the deploy: this merge commit's four stacks, by digest.
    record = json.loads((trusted / "reviewed.json").read_text())
    assert record["head"] == git(repo, "rev-parse", "HEAD")
    assert record["exit"] == 3
    assert sorted(record["stacks"]) == ["europe-west1", "global", "us-central1", "us-east4"]


@pytest.mark.scenario
def test_a_module_the_pull_request_shadows_stops_its_plan(attempt: Any) -> None:
    # Issue 36: platform/gkr/src/safeyaml/ shadowed the real safeyaml (platform/gkr/ had no owner) and rewrote
    # fleet.yaml only under `cdktn deploy`. The default branch's launcher refuses it before importing anything.
    repo, base = attempt
    shadow = repo / "platform/gkr/src/safeyaml/__init__.py"
    shadow.parent.mkdir(parents=True)
    shadow.write_text("import sys\nprint('shadow ran', file=sys.stderr)\n")
    commit(repo, "a helper module")
    outputs, trusted = as_github_runs_it(repo, base)
    assert outputs == {"exit": "2"}  # the decision fails: nothing to approve, nothing recorded to deploy
    assert (trusted / "untrusted/exit").read_text().strip() == "2"
    error = (trusted / "untrusted/error.txt").read_text()
    assert "top-level module safeyaml is defined by platform/gkr and platform/safeyaml" in error
    assert "shadow ran" not in error
    assert not (trusted / "reviewed.json").exists()
