"""gkr's RayJobs as containers: KubeRay's head, workers and submitter, the trainer driving them.

Each run reads what the job itself printed (the submitter follows the driver's log, as `kubectl logs` of
KubeRay's submitter Job would show it); waits are bounded by the run's own progress lines, not by time
alone. A killed container is a SIGKILL to its process; the kubelet (restartPolicy Always, KubeRay's
default for Ray pods) restarts it in place.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.twin.conftest import REPO, golden
from twin import operator
from twin.kubelet import Kubelet, RunningPod
from twin.operator import RayJobRun

pytestmark = pytest.mark.twin
RL_STEP = re.compile(r"rl step (\d+)/")
STEP = re.compile(r"^step (\d+)/", re.MULTILINE)
RESTARTING = re.compile(r"replica group (\d+): .*; restarting it in")
REJOINED = re.compile(r"replica group \d+: (healed from a live group|resumed from checkpoint)")


def _driver_log(kubelet: Kubelet, run: RayJobRun) -> str:
    assert run.submitter is not None
    return kubelet.logs(run.submitter, run.submitter.containers[0])


def _steps(pattern: re.Pattern[str], text: str) -> list[int]:
    return [int(m.group(1)) for m in pattern.finditer(text)]


def _crash_group(kubelet: Kubelet, run: RayJobRun, group: str) -> RunningPod:
    pod = run.workers[group][0]
    kubelet.crash(pod, pod.containers[-1])
    kubelet.wait_for(lambda: kubelet.restarts(pod, pod.containers[-1]) >= 1, 60, f"the {group} container restarted")
    return pod


def test_grpo_runs_rl_steps_in_containers_and_survives_a_killed_generator(kubelet: Kubelet) -> None:
    run = operator.start(kubelet, golden("grpo-tiny-cpu"))

    def log() -> str:
        return _driver_log(kubelet, run)

    kubelet.wait_for(lambda: len(_steps(RL_STEP, log())) >= 1, 600, "the first RL step in the driver's log")
    before = max(_steps(RL_STEP, log()))
    _crash_group(kubelet, run, "generators")
    # A generator lost with its pod: the launcher starts another (incarnation .1) and steps go on.
    kubelet.wait_for(lambda: max(_steps(RL_STEP, log())) >= before + 2, 600, "two RL steps after the generator died")
    text = log()
    assert "generator-0.1" in text, text[-4000:]
    steps = _steps(RL_STEP, text)
    assert steps == sorted(set(steps)), "a step committed twice or out of order"


def _render(spec: Path) -> dict[str, Any]:
    out = subprocess.run(
        [str(REPO / ".venv/bin/gkr"), "submit", "-f", str(spec), "--dry-run", "-o", "yaml"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    from safeyaml import load

    doc = load(out.stdout)
    assert isinstance(doc, dict)
    return doc


def test_pretraining_rayjob_restarts_only_the_killed_group(kubelet: Kubelet) -> None:
    run = operator.start(kubelet, _render(Path(__file__).parent / "jobs/pretrain-tiny-cpu.yaml"))

    def log() -> str:
        return _driver_log(kubelet, run)

    kubelet.wait_for(lambda: len(_steps(STEP, log())) >= 3, 600, "three training steps in the driver's log")
    _crash_group(kubelet, run, next(iter(run.workers)))  # one of the two worker pods: one replica group's
    kubelet.wait_for(lambda: bool(RESTARTING.search(log())), 300, "the supervisor restarting the lost group")
    crashed_at = max(_steps(STEP, log()))
    kubelet.wait_for(lambda: bool(REJOINED.search(log())), 600, "the restarted group healing or resuming")
    kubelet.wait_for(lambda: max(_steps(STEP, log())) >= crashed_at + 3, 600, "three steps after the restart")
    text = log()
    restarted = {int(m.group(1)) for m in RESTARTING.finditer(text)}
    assert len(restarted) == 1, text[-4000:]  # the lost pod's group alone; the other trained on
    steps = _steps(STEP, text)
    assert steps == sorted(set(steps)), "a step committed twice or out of order"
