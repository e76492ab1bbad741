"""Spare replica groups (issue 28): held in the RayJob's one worker group, so Kueue admits them with the run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from gkr import groups
from gkr.spec import JobSpec
from tests.gkr.test_groups import render

TRAINER = "python train.py configs/config.yaml model=small run.launcher=ray ft.device=cuda run.name=big"
RUN = ["submit", "--team", "pretraining", "--name", "big", "--region", "us-central1", "--pool", "h200-a"]


def _workers(objects: list[dict[str, object]]) -> dict[str, object]:
    (job,) = objects
    spec = job["spec"]
    assert isinstance(spec, dict)
    (workers,) = spec["rayClusterSpec"]["workerGroupSpecs"]
    return {"entrypoint": spec["entrypoint"], "replicas": workers["replicas"], "max": workers["maxReplicas"]}


def test_a_large_trainer_run_holds_one_spare_group_by_default() -> None:
    objects = render(None, **_job(pods=256, replica_groups=256))
    got = _workers(objects)
    assert (got["replicas"], got["max"]) == (257, 257)
    assert str(got["entrypoint"]).endswith(f"{TRAINER} ft.spare_groups=1")
    assert "--pods 257 " in str(got["entrypoint"])  # the spare's node is checked too


@pytest.mark.parametrize(
    ("given", "replicas", "spares"),
    [
        ({"pods": 255, "replica_groups": 255}, 255, 0),  # below contract.spares.SPARE_FROM
        ({"pods": 256}, 256, 0),  # no shape: the trainer decides its groups, gkr holds nothing
        ({"pods": 256, "replica_groups": 256, "command": ["python", "other.py"]}, 256, 0),  # not the trainer on Ray
        ({"pods": 8, "group_size": 16, "spare_groups": 2}, 12, 2),  # a group of 2 pods: 2 spares are 4 pods
        ({"pods": 8, "group_size": 4, "spare_groups": 1}, 9, 1),  # 2 groups a pod: a spare takes a whole pod
        ({"pods": 256, "replica_groups": 256, "spare_groups": 0}, 256, 0),  # asked for none
    ],
)
def test_spare_pods_follow_the_shape(given: dict[str, object], replicas: int, spares: int) -> None:
    got = _workers(render(None, **_job(**given)))
    assert got["replicas"] == replicas
    assert str(got["entrypoint"]).endswith(f"ft.spare_groups={spares}") is bool(spares)


def _job(**given: object) -> dict[str, object]:
    job: dict[str, object] = {
        "name": "big",
        "team": "pretraining",
        "region": "us-central1",
        "pool": "h200-a",
        "command": TRAINER.split(),
    }
    return job | given


def test_the_default_rule_is_the_contracts() -> None:
    base = JobSpec(name="x", team="t", pods=512, replica_groups=512, command=tuple(TRAINER.split()))
    assert groups.spares(base) == 1
    assert groups.spares(JobSpec(name="x", team="t", pods=1024, replica_groups=1024, command=TRAINER)) == 2


REFUSED = [
    # Issue 40: 20 spares for 2 groups rendered 88 pods, and the trainer refused them once admitted (contract.spares).
    (
        ["--spare-groups", "20", "--replica-groups", "2", "--", *TRAINER.split()],
        "flag --spare-groups: 20 is more than the run's 2 replica groups; use 0 to 2",
    ),
    (
        ["--spare-groups", "65", "--group-size", "1", "--", *TRAINER.split()],
        "flag --spare-groups: 65 is more than 64 spares; use 0 to 64",
    ),
    (
        ["--spare-groups", "-1"],
        "flag --spare-groups: must be at least 0 (got -1); set spare_groups in the job file or with --spare-groups",
    ),
    (
        ["--spare-groups", "1", "--", "python", "other.py"],
        "flag --spare-groups: spare workers are used by the trainer on Ray (a rayjob whose command has "
        "run.launcher=ray); set spare_groups: 0 or run the trainer",
    ),
    (
        ["--spare-groups", "1", "--", *TRAINER.split()[:-1]],
        "flag --spare-groups: a spare is a replica group's worth of workers: set replica_groups or group_size",
    ),
    (
        ["--replica-groups", "8", "--", *TRAINER.split(), "ft.spare_groups=3"],
        "flag the command after --: sets ft.spare_groups=...; gkr sets it from the job: use spare_groups",
    ),
]


@pytest.mark.parametrize(("args", "line"), REFUSED)
def test_spares_nothing_would_use_are_one_line(
    gkr: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], line: str
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))  # refused before any cluster call
    tail = args if "--" in args else [*args, "--replica-groups", "8", "--", *TRAINER.split()]
    result = gkr(*RUN, "--pods", "8", *tail)
    assert (result.exit_code, result.stderr) == (2, f"error: {line}\n")
    assert result.stdout == ""


def test_a_shell_line_cannot_take_the_override(gkr: Callable[..., Result], tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        f"name: big\nteam: pretraining\nregion: us-central1\npods: 8\nreplica_groups: 8\nspare_groups: 1\n"
        f"command: '{TRAINER} && echo done'\n"
    )
    result = gkr("submit", "-f", str(job), "--dry-run")
    assert result.exit_code == 2
    assert "gkr appends ft.spare_groups=N to it: give it as a list" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_quota_counts_the_spares(gkr: Callable[..., Result]) -> None:
    """pretraining's 2,560 GPUs in us-central1 hold 320 groups of one pod, not 320 and the default spare."""
    result = gkr(*RUN, "--pods", "320", "--replica-groups", "320", "--dry-run", "--", *TRAINER.split())
    assert result.exit_code == 2
    assert "320 pods and 1 spare pod x 8 GPUs = 2,568 GPUs, above team pretraining's quota of 2,560" in result.stderr
    fits = gkr(
        *RUN, "--pods", "320", "--replica-groups", "320", "--spare-groups", "0", "--dry-run", "--", *TRAINER.split()
    )
    assert fits.exit_code == 0, fits.stderr


def test_the_summary_counts_the_spares_resources(gkr: Callable[..., Result]) -> None:
    """Spare pods take their GPUs, CPUs and memory from the start: the summary counts all three over them."""
    result = gkr(*RUN, "--pods", "32", "--group-size", "16", "--spare-groups", "1", "--dry-run", "--", *TRAINER.split())
    assert result.exit_code == 0, result.stderr
    line = result.stderr.splitlines()[1]
    assert line.startswith(
        "32 pods and 2 spare pods x 8 H200 = 272 GPUs in 16 replica groups x 16 GPUs (2 pods each) and 1 spare group; "
        "34 x 201 CPU = 6,834 CPU; 34 x 2.59 TiB = "
    ), line
