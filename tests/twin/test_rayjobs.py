"""gkr's RayJobs as containers: KubeRay's head, workers and submitter, the trainer driving them.

Each run reads what the job itself printed (the submitter follows the driver's log, as `kubectl logs` of
KubeRay's submitter Job would show it); waits are bounded by the run's own progress lines, not by time
alone. A killed container is a SIGKILL to its process; the kubelet (restartPolicy Always, KubeRay's
default for Ray pods) restarts it in place.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.twin.conftest import REPO, golden
from twin import engine, operator
from twin.kubelet import Kubelet, RunningPod
from twin.operator import RayJobRun

pytestmark = pytest.mark.twin
RL_STEP = re.compile(r"rl step (\d+)/")
STEP = re.compile(r"^step (\d+)/", re.MULTILINE)
RESTARTING = re.compile(r"replica group (\d+): .*; restarting it in")
PLACED = re.compile(r"replica group (\d+): training on (\S+) ")
REJOINED = re.compile(r"replica group \d+: (healed from a live group|resumed from checkpoint)")


def _driver_log(kubelet: Kubelet, run: RayJobRun) -> str:
    assert run.submitter is not None
    return kubelet.logs(run.submitter, run.submitter.containers[0])


def _records(kubelet: Kubelet, run: RayJobRun, path: str) -> list[dict[str, Any]]:
    """The run's JSON-lines records, from the driver's report folder on the head (run.report_dir)."""
    proc = engine.run(["exec", run.head.podman_name("ray-head"), "cat", f"/tmp/meridian-runs/{path}"])
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


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
    _crash_group(kubelet, run, "generators")

    def events() -> list[tuple[Any, Any]]:
        return [(r.get("event"), r.get("generator")) for r in _records(kubelet, run, "grpo-tiny-cpu/rl.jsonl")]

    # Ray sees the lost node and its actor; the launcher starts another generator (incarnation .1).
    kubelet.wait_for(lambda: ("generator_started", "generator-0.1") in events(), 600, "generator-0.1 started")
    assert ("generator_exited", "generator-0.0") in events()
    restarted_at = max(_steps(RL_STEP, log()))
    kubelet.wait_for(lambda: max(_steps(RL_STEP, log())) >= restarted_at + 2, 600, "two RL steps from the new one")
    steps = _steps(RL_STEP, log())
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


def test_pretraining_rayjob_restarts_only_the_killed_pods_groups(kubelet: Kubelet) -> None:
    run = operator.start(kubelet, _render(Path(__file__).parent / "jobs/pretrain-tiny-cpu.yaml"))

    def log() -> str:
        return _driver_log(kubelet, run)

    def training_on() -> dict[int, str]:  # group -> the pod's address
        return {int(m.group(1)): m.group(2) for m in PLACED.finditer(log())}

    # Both: at ft.min_replicas 1, group 1 may train its first steps alone while group 0's pod is still starting
    # (stop 51's CI: three steps logged, group 0 not yet training).
    kubelet.wait_for(lambda: len(_steps(STEP, log())) >= 3, 600, "three training steps in the driver's log")
    kubelet.wait_for(lambda: 0 in training_on(), 600, "group 0 training")
    placed = training_on()
    pods = [pod for pods in run.workers.values() for pod in pods]
    victim = next(pod for pod in pods if pod.ip == placed[0])  # the worker pod that holds group 0
    on_victim = {group for group, ip in placed.items() if ip == victim.ip}
    kubelet.crash(victim, victim.containers[-1])
    kubelet.wait_for(lambda: kubelet.restarts(victim, victim.containers[-1]) >= 1, 60, "the container restarted")
    kubelet.wait_for(lambda: bool(RESTARTING.search(log())), 300, "the supervisor restarting the lost group")
    crashed_at = max(_steps(STEP, log()))
    kubelet.wait_for(lambda: bool(REJOINED.search(log())), 600, "the restarted group healing or resuming")
    kubelet.wait_for(lambda: max(_steps(STEP, log())) >= crashed_at + 3, 600, "three steps after the restart")
    text = log()
    assert {int(m.group(1)) for m in RESTARTING.finditer(text)} == on_victim, text[-4000:]
    steps = _steps(STEP, text)
    assert steps == sorted(set(steps)), "a step committed twice or out of order"


def test_without_ray_version_kuberays_probes_never_pass(kubelet: Kubelet) -> None:
    """KubeRay v1.7.0 probes a Ray pod with `wget` unless spec.rayVersion is 2.53 or later; the trainer image has
    no wget, so before gkr declared rayVersion no Ray pod turned Ready and KubeRay never submitted a job."""
    rayjob = golden("grpo-tiny-cpu")
    del rayjob["spec"]["rayClusterSpec"]["rayVersion"]
    job = operator.rayjob_pods(rayjob)
    head = kubelet.start(job.cluster.head)
    probe = head.plan.containers[0].readiness if head.plan else None
    assert probe is not None
    assert probe.kind == "exec"
    assert "wget" in " ".join(probe.command)
    kubelet.wait_for(lambda: _raylet_up(kubelet, head), 120, "the head's raylet")
    assert not kubelet.ready(head)
    probed = engine.run(["exec", head.podman_name("ray-head"), *probe.command], check=False)
    assert re.search(r"wget: (command )?not found", probed.stdout + probed.stderr), probed


def _raylet_up(kubelet: Kubelet, head: RunningPod) -> bool:
    return engine.run(["exec", head.podman_name("ray-head"), "ray", "health-check"], check=False).returncode == 0
