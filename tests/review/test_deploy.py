"""Only the reviewed plan is applied: `scripts/cdktn deploy STACK` against the decision's record.

Terraform is a stub on PATH that logs each call: the deploy must synthesize, compare the stack's digest with
the record, and call `apply` only for a match, on the very plan it saved. Issue 36's attempt (a module that
shadows `safeyaml` and rewrites the fleet only under `cdktn deploy`) is refused before any of its code runs.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from meridian_infra.report import Stacks
from review import reviewed
from review.deploy import destination
from review.review import review
from tests.conftest import REPO
from tests.review.conftest import KUBECTL, Sandbox, at_base, commit, git, replace_once

TERRAFORM = """#!/bin/sh
echo "$*" >> "$TERRAFORM_LOG"
case "$1" in
  version) echo "Terraform v$(cat "$PINNED")" ;;
  plan) for a in "$@"; do case "$a" in -out=*) echo plan > "${a#-out=}" ;; esac; done ;;
esac
"""


@pytest.fixture
def deploy_env(tmp_path: Path) -> dict[str, str]:
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "terraform").write_text(TERRAFORM)
    (stub / "terraform").chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{stub}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "TERRAFORM_LOG": str(tmp_path / "terraform.log"),
        "PINNED": str(REPO / "infra/.terraform-version"),
        "GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "adc.json"),  # the credentials check only
        "MERIDIAN_DEPLOYED": str(tmp_path / "deployed"),
    }


def cdktn_deploy(root: Path, env: dict[str, str], record: dict[str, Any] | str, *args: str) -> tuple[int, str, str]:
    """(exit, stderr, Terraform's calls) of `scripts/cdktn deploy` in `root` with `record` as the decision's."""
    path = Path(env["TERRAFORM_LOG"]).with_name("reviewed.json")
    path.write_text(record if isinstance(record, str) else json.dumps(record))
    run = subprocess.run(
        [str(root / "scripts/cdktn"), "deploy", *args],
        env={**env, "MERIDIAN_REVIEWED": str(path)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    log = Path(env["TERRAFORM_LOG"])
    return run.returncode, run.stderr, log.read_text() if log.exists() else ""


@pytest.mark.scenario
def test_the_reviewed_stack_is_applied_from_its_saved_plan_and_recorded(
    stacks: Stacks, deploy_env: dict[str, str]
) -> None:
    record = reviewed.record("f" * 40, 0, stacks)  # what the decision wrote for this very tree
    code, err, calls = cdktn_deploy(REPO, deploy_env, record, "us-east4", "--auto-approve")
    assert code == 0, err
    assert calls.splitlines()[1:] == [
        "init -input=false",
        "plan -input=false -out=reviewed.tfplan",
        "apply -input=false reviewed.tfplan",  # the saved plan: exactly what was compared
    ]
    kept = Path(deploy_env["MERIDIAN_DEPLOYED"]) / "us-east4.tf.json"
    assert kept.read_bytes() == reviewed.canonical(stacks["us-east4"])
    assert reviewed.deployed_stacks(kept.parent) == {"us-east4": stacks["us-east4"]}


@pytest.mark.scenario
def test_a_stack_other_than_the_reviewed_one_never_reaches_terraform(
    stacks: Stacks, deploy_env: dict[str, str]
) -> None:
    # The review saw us-east4's h200-a at 384 nodes; what this checkout synthesizes is something else.
    seen = copy.deepcopy(stacks)
    pools = seen["us-east4"]["resource"]["google_container_node_pool"]
    (name,) = [k for k, v in pools.items() if v.get("name") == "h200-a"]
    pools[name]["node_count"] = 1
    code, err, calls = cdktn_deploy(REPO, deploy_env, reviewed.record("f" * 40, 0, seen), "us-east4", "--auto-approve")
    assert code == 2
    (line,) = err.splitlines()
    assert line.startswith("error: stack us-east4: this checkout synthesizes sha256 ")
    assert f"the review approved {reviewed.digest(seen['us-east4'])[:16]}" in line
    assert line.endswith("Terraform was not run")
    assert [c.split()[0] for c in calls.splitlines()] == ["version"]  # scripts/cdktn's version check, nothing else
    assert not Path(deploy_env["MERIDIAN_DEPLOYED"]).exists()


@pytest.mark.parametrize(
    ("record", "args", "said"),
    [
        ("{", ("us-east4",), "not JSON: not a reviewed-plan record"),
        ('{"format": "x", "stacks": {}}', ("us-east4",), "not a meridian-reviewed/1 record"),
        (
            {"format": reviewed.FORMAT, "stacks": {"us-east4": "not-a-digest"}},
            ("us-east4",),
            "stacks.us-east4: not a stack name with a sha256 digest",
        ),
        ({"format": reviewed.FORMAT, "stacks": {}}, ("us-east4", "europe-west1"), "one stack per deploy"),
    ],
)
def test_a_bad_record_or_request_is_one_line_before_anything_runs(
    deploy_env: dict[str, str], record: Any, args: tuple[str, ...], said: str
) -> None:
    code, err, calls = cdktn_deploy(REPO, deploy_env, record, *args)
    assert code == 2
    (line,) = err.splitlines()
    assert said in line
    assert "init" not in calls
    assert "apply" not in calls


def test_deploy_without_a_record_names_where_to_get_it(deploy_env: dict[str, str]) -> None:
    env = {k: v for k, v in deploy_env.items() if k != "MERIDIAN_REVIEWED"}
    run = subprocess.run(
        [str(REPO / "scripts/cdktn"), "deploy", "global"], env=env, capture_output=True, text=True, check=False
    )
    assert run.returncode == 2
    assert "set MERIDIAN_REVIEWED to the `plan-review-reviewed` artifact" in run.stderr


@pytest.mark.scenario
def test_a_module_shadowed_for_deploy_is_refused_before_it_runs(sandbox: Sandbox, deploy_env: dict[str, str]) -> None:
    # Issue 36: platform/gkr/src/safeyaml/ re-exports the real module and, only under `cdktn deploy`, cuts
    # us-east4's h200-a to one node. The launcher refuses the second definition before importing anything.
    repo, _ = at_base(sandbox)
    (repo / ".venv").unlink(missing_ok=True)
    (repo / ".venv").symlink_to(REPO / ".venv")  # `make setup`
    shadow = repo / "platform/gkr/src/safeyaml/__init__.py"
    shadow.parent.mkdir(parents=True)
    shadow.write_text("import sys\nprint('shadow ran', file=sys.stderr)\n")
    code, err, calls = cdktn_deploy(repo, deploy_env, {"format": reviewed.FORMAT, "stacks": {}}, "us-east4")
    assert code == 2
    assert err.splitlines() == [
        "error: top-level module safeyaml is defined by platform/gkr and platform/safeyaml: every module has "
        "exactly one owner (the first on sys.path would shadow the other); rename or remove one of them"
    ]
    assert [c.split()[0] for c in calls.splitlines()] == ["version"]


def test_the_applied_stack_is_recorded_beside_its_state(stacks: Stacks, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MERIDIAN_DEPLOYED", raising=False)
    gcs = stacks["us-east4"]["terraform"]["backend"]["gcs"]
    fleet = gcs["prefix"].rpartition("/")[0]
    assert destination(stacks["us-east4"], "gcs") == f"gs://{gcs['bucket']}/{fleet}/deployed"
    assert destination(stacks["us-east4"], "local").endswith("infra/.state/deployed")


@pytest.mark.scenario
def test_a_change_that_slipped_through_shows_again_against_what_is_deployed(sandbox: Sandbox, stacks: Stacks) -> None:
    # main holds the 384-node pools cut to one node (merged past the review); what is deployed still has 384.
    # The next pull request changes nothing there, yet its review compares with the deployed stacks.
    repo, _ = at_base(sandbox)
    path = repo / "infra/meridian_infra/gpu_pools.py"
    path.write_text(
        replace_once(
            "node_count=None if flex else pool.nodes,",
            "node_count=None if flex else {384: 1}.get(pool.nodes, pool.nodes),",
        )(path.read_text())
    )
    commit(repo, "slipped through")
    slipped = git(repo, "rev-parse", "HEAD")
    (repo / "README.md").write_text((repo / "README.md").read_text() + "\nA typo fixed.\n")
    commit(repo, "an unrelated change")
    result = review(repo, slipped, kubectl=KUBECTL, cache=sandbox[2], deployed=dict(stacks))
    assert "us-east4: node pool h200-a in us-east4-b: 384 nodes, 3,072 H200 -> 1 node, 8 H200 (-3,064 H200)" in (
        result.destructive
    )
    assert result.exit_code == 3
    assert (
        "what is deployed differs from BASE's synthesis in us-central1, us-east4: HEAD is compared with what is "
        "deployed there" in result.notes
    )
