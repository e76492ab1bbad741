"""The trainer resumes only from its team's folders of the fleet's checkpoint buckets (issue 27).

In the fleet gkr sets $MERIDIAN_CHECKPOINT_ROOTS (every region's bucket, the team's folder) and
$MERIDIAN_CHECKPOINT_DIR (this region's, mounted); any other location is refused at start in one line,
exit 2. Without them (a laptop, CI) only local directories are allowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from trainer.checkpoint.resume import location_problem
from trainer.cli import main
from trainer.config import compose

from contract import names
from contract.registry import GENERATED_DIR
from gkr import registry as gkr_registry
from gkr.flags import as_flags
from gkr.render import render
from gkr.resolve import resolve
from gkr.submit import read
from tests.conftest import REPO
from tests.gkr.conftest import EXAMPLES
from tests.trainer.conftest import CONFIG

ROOTS = "gs://meridian-ckpt-us-central1/teams/research/,gs://meridian-ckpt-us-east4/teams/research/"
FLEET = {names.CHECKPOINT_ROOTS_ENV: ROOTS, names.CHECKPOINT_DIR_ENV: "/checkpoints"}


def problem(environ: dict[str, str], *resume_from: str, checkpoint_dir: str = "/checkpoints/run") -> str | None:
    listed = ",".join(resume_from)
    cfg = compose(CONFIG, ["run.name=run", f"checkpoint.dir={checkpoint_dir}", f"checkpoint.resume_from=[{listed}]"])
    return location_problem(cfg, environ)


@pytest.mark.parametrize(
    "location",
    [
        "gs://meridian-ckpt-us-east4/teams/research/run",  # another region's folder of the same run
        "gs://meridian-ckpt-us-central1/teams/research/older-run/",
        "/checkpoints/older-run",  # the mount of this region's team folder
    ],
)
def test_the_teams_own_folders_are_allowed_in_the_fleet(location: str) -> None:
    assert problem(FLEET, location) is None


@pytest.mark.parametrize(
    ("location", "words"),
    [
        ("gs://attacker-bucket/teams/research/run", "is outside the team's checkpoint folders"),
        ("gs://meridian-ckpt-us-east4/teams/evals/run", "is outside the team's checkpoint folders"),  # another team
        ("gs://meridian-ckpt-us-east4/teams/research-x/run", "is outside the team's checkpoint folders"),
        ("gs://meridian-ckpt-us-east4/teams/research/../evals/run", "has a '.' or '..' segment"),
        ("gcs://meridian-ckpt-us-east4/teams/research/run", "is outside the team's checkpoint folders"),
        ("https://example.com/ckpt", "is outside the team's checkpoint folders"),
        ("/tmp/crafted", "is a local directory outside the checkpoint mount"),
        ("/checkpoints/../tmp/crafted", "has a '.' or '..' segment"),
        ("file:///tmp/crafted", "is a local directory outside the checkpoint mount"),
    ],
)
def test_anything_else_is_refused_in_the_fleet(location: str, words: str) -> None:
    found = problem(FLEET, location)
    assert found is not None
    assert found.startswith(f"checkpoint.resume_from[0]: {location!r} {words}")
    assert "\n" not in found


def test_checkpoint_dir_itself_is_bounded_in_the_fleet() -> None:
    found = problem(FLEET, checkpoint_dir="/tmp/elsewhere/run")
    assert found is not None
    assert found.startswith("checkpoint.dir: '/tmp/elsewhere/run' is a local directory")


def test_a_local_run_reads_local_directories_only() -> None:
    assert problem({}, "/tmp/a", "relative/b", checkpoint_dir="/tmp/run") is None
    found = problem({}, "gs://meridian-ckpt-us-east4/teams/research/run", checkpoint_dir="/tmp/run")
    assert found is not None
    assert "is not a local directory, and this run has no fleet checkpoint locations" in found


def test_a_malformed_roots_variable_is_refused() -> None:
    found = problem({names.CHECKPOINT_ROOTS_ENV: "gs://bucket"}, checkpoint_dir="/tmp/run")
    assert found == (
        f"${names.CHECKPOINT_ROOTS_ENV}: 'gs://bucket' is not a gs:// folder (gs://<bucket>/<prefix>/); "
        "fix the job's environment"
    )


def test_train_py_refuses_a_foreign_resume_location_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    mount = tmp_path / "checkpoints"
    monkeypatch.setenv(names.CHECKPOINT_ROOTS_ENV, ROOTS)
    monkeypatch.setenv(names.CHECKPOINT_DIR_ENV, str(mount))
    monkeypatch.setenv(names.RESUME_FROM_ENV, "gs://attacker-bucket/teams/research/run")
    code = main([str(CONFIG), "run.name=run", f"run.report_dir={tmp_path / 'runs'}"])
    assert code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("train.py: checkpoint.resume_from[0]: 'gs://attacker-bucket/teams/research/run' is outside")
    assert not (tmp_path / "runs").exists()  # refused before anything started


def test_what_gkr_renders_is_what_the_trainer_accepts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The roots gkr sets name every region's bucket, the team's folder only; its checkpoint.dir passes."""
    registry = gkr_registry.load(REPO / GENERATED_DIR).registry  # the committed registry, as gkr reads it
    spec, _ = read(str(EXAMPLES / "pretrain-128-nodes.yaml"), as_flags({"team": "research"}))
    resolved, problems = resolve(spec, registry, None)
    assert resolved is not None
    assert not problems
    (job,) = render(resolved)
    pod: dict[str, Any] = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"] if "value" in e}
    assert env[names.CHECKPOINT_ROOTS_ENV].split(",") == [
        f"gs://{region.checkpoint_bucket}/teams/research/" for region in registry.regions
    ]
    for key in (names.CHECKPOINT_ROOTS_ENV, names.CHECKPOINT_DIR_ENV):
        monkeypatch.setenv(key, env[key])
    other = registry.regions[1].checkpoint_bucket
    cfg = compose(CONFIG, ["run.name=exp", f"checkpoint.resume_from=[gs://{other}/teams/research/exp]"])
    assert location_problem(cfg, env) is None
