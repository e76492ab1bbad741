"""A run across regions on CPU: two "regions" as two local launchers (separate process trees, report and
checkpoint directories, ft.region) sharing one torchft Lighthouse that the test runs as its own process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
from trainer.checkpoint import MARKER, step_dir

from contract.names import ADVERTISE_HOST_ENV, LIGHTHOUSE_ENV, REGION_ENV, RESUME_FROM_ENV
from tests.conftest import REPO
from tests.ports import free_port
from tests.trainer.conftest import events, final, run, start, wait_for
from tests.trainer.test_lighthouse_mtls import guarded_lighthouse
from tests.trainer.test_tls_pg import HOST
from tests.waiting import until

pytestmark = pytest.mark.live  # two regions of the driver beside a Lighthouse

STEPS = 80
KILL = 10  # region b dies at this step or later ...
LEAD = 40  # ... and returns once region a has committed alone up to here: far ahead of b, which starts at 0
# One replica group per region; a dead region is not restarted by its launcher (the test kills the launcher).
REGION = (f"run.steps={STEPS}", "ft.replica_groups=1", "checkpoint.every=1000")


@contextmanager
def lighthouse(tmp_path: Path) -> Iterator[str]:
    """torchft's Lighthouse binary on a free port, as gkr's Deployment runs it for a run; yields its address."""
    port = free_port("localhost")
    command = [str(REPO / ".venv/bin/torchft_lighthouse"), "--min_replicas=1", f"--bind=[::]:{port}"]
    command += ["--join_timeout_ms=1000", "--quorum_tick_ms=100", "--heartbeat_timeout_ms=2000"]
    with (tmp_path / "lighthouse.log").open("wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield f"http://localhost:{port}"
    finally:
        proc.kill()
        proc.wait()


def _kill_tree(launcher: subprocess.Popen[str], run_dir: Path) -> float:
    """SIGKILL a region's launcher (so nothing restarts its groups), then every rank it started (ranks.json)."""
    ranks = json.loads((run_dir / "ranks.json").read_text())
    launcher.kill()
    launcher.wait()
    for pids in ranks.values():
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return time.time()


@contextmanager
def _paused(run_dir: Path) -> Iterator[None]:
    """A region's ranks stopped (SIGSTOP) for the block: a test's control over who may run ahead, not a fault."""
    pids = [pid for pids in json.loads((run_dir / "ranks.json").read_text()).values() for pid in pids]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def _starts(tmp_path: Path, name: str) -> int:
    return sum(e["event"] == "started" for e in events(tmp_path, name, 0))


def _wait(predicate: Callable[[], bool], proc: subprocess.Popen[str], what: str, within_s: float = 600) -> None:
    until(predicate, within_s, f"saw {what}", proc)


def test_a_region_dies_the_other_commits_alone_and_the_region_returns_and_heals(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    launched: list[tuple[subprocess.Popen[str], Path]] = []
    with lighthouse(tmp_path) as address:
        try:
            # Region a names the Lighthouse on its command line, region b gets it from gkr's environment. a waits,
            # stopped, while b starts, so neither can train far alone before both are in the quorum.
            a = start(tmp_path, "region-a", *REGION, "ft.region=a", f"ft.lighthouse={address}")
            launched.append((a, runs / "region-a"))
            _wait(lambda: _starts(tmp_path, "region-a") == 1, a, "region a started")
            b_env = {LIGHTHOUSE_ENV: address, REGION_ENV: "b"}
            with _paused(runs / "region-a"):
                b = start(tmp_path, "region-b", *REGION, env=b_env)
                launched.append((b, runs / "region-b"))
                _wait(lambda: _starts(tmp_path, "region-b") == 1, b, "region b started")
            killed_at, returned_at = _kill_and_return(tmp_path, a, b, b_env, launched)
            out_a, _ = a.communicate(timeout=600)
            out_b, _ = launched[-1][0].communicate(timeout=600)
        finally:
            for proc, run_dir in launched:
                if proc.poll() is None:
                    _kill_tree(proc, run_dir)
    assert a.returncode == 0, out_a[-3000:]
    assert launched[-1][0].returncode == 0, out_b[-3000:]

    # Region a's steps only go forward (at the start either region may heal from the other); from the kill
    # on it committed every step, one by one, some of them alone while region b was gone.
    commits = [e for e in events(tmp_path, "region-a", 0) if e["event"] == "commit"]
    assert [e["step"] for e in commits] == sorted({e["step"] for e in commits})
    since_kill = [e["step"] for e in commits if e["time"] > killed_at]
    assert since_kill == list(range(since_kill[0], STEPS + 1))
    assert any(e["participants"] == 1 and killed_at < e["time"] < returned_at for e in commits)
    assert any(e["participants"] == 2 for e in commits if e["time"] > returned_at)  # b rejoined

    # Region b's second launch healed from region a; both end with the same weights.
    returned = events(tmp_path, "region-b", 0)
    assert any(e["event"] == "healed" and e["time"] > returned_at for e in returned)
    assert final(tmp_path, "region-b", 0)["step"] == final(tmp_path, "region-a", 0)["step"] == STEPS
    assert final(tmp_path, "region-b", 0)["weights"] == final(tmp_path, "region-a", 0)["weights"]
    # No launcher started a Lighthouse of its own.
    for name in ("region-a", "region-b"):
        assert (runs / name / "lighthouse").read_text() == address


def _kill_and_return(
    tmp_path: Path,
    a: subprocess.Popen[str],
    b: subprocess.Popen[str],
    b_env: dict[str, str],
    launched: list[tuple[subprocess.Popen[str], Path]],
) -> tuple[float, float]:
    """Both regions in one quorum; every group of b killed; a commits alone; b launched again. When b died and returned."""
    runs = tmp_path / "runs"

    def together() -> bool:
        return any(e["event"] == "commit" and e["participants"] == 2 for e in events(tmp_path, "region-a", 0))

    _wait(together, a, "both regions in one quorum")
    wait_for(b, tmp_path, "region-b", "commit", KILL, within_s=600, group=0)
    killed_at = _kill_tree(b, runs / "region-b")

    def alone() -> bool:
        log = events(tmp_path, "region-a", 0)
        return any(
            e["event"] == "commit" and e["participants"] == 1 and e["time"] > killed_at and e["step"] >= LEAD
            for e in log
        )

    _wait(alone, a, f"region a committing alone at step {LEAD}")
    # Region a waits, stopped, while region b's processes start (import torch, build the model): however
    # slow or fast this machine is, a cannot finish before b is back. b's first quorum may leave the paused a
    # out; b heals as soon as it shares one with a, which has most of the run still to go.
    with _paused(runs / "region-a"):
        returned_at = time.time()
        b = start(tmp_path, "region-b", *REGION, env=b_env)
        launched.append((b, runs / "region-b"))
        _wait(lambda: _starts(tmp_path, "region-b") == 2, b, "region b started again")
    return killed_at, returned_at


def test_a_region_resumes_from_the_newest_checkpoint_of_any_region(tmp_path: Path) -> None:
    """Each region writes only its own checkpoint.dir; resume reads the others' (checkpoint.resume_from)."""
    ckpt = tmp_path / "checkpoints"
    run(tmp_path, "region-b", "run.steps=20", "ft.replica_groups=1", "checkpoint.every=10", "ft.region=b")
    run(tmp_path, "region-a", "run.steps=30", "ft.replica_groups=1", "checkpoint.every=10", "ft.region=a")
    before = sorted(p.relative_to(ckpt) for p in (ckpt / "region-a").rglob("*"))

    # Region b again, its own newest checkpoint at 20, region a's at 30; one other "region" that is gone.
    # (A local run resumes from local directories only: resume.location_problem; in the fleet, gs:// folders.)
    resume_from = f"{ckpt / 'region-a'}, {ckpt / 'region-gone'}"
    run(
        tmp_path, "region-b", "run.steps=40", "ft.replica_groups=1", "checkpoint.every=10", "ft.region=b",
        env={RESUME_FROM_ENV: resume_from},
    )  # fmt: skip
    log = events(tmp_path, "region-b", 0)
    resumed = [e for e in log if e["event"] == "resumed"]
    assert [(e["step"], e["dir"]) for e in resumed] == [(30, str(ckpt / "region-a"))]
    assert final(tmp_path, "region-b", 0)["step"] == 40
    # Nothing written to region a's directory; region b's own holds its new checkpoints.
    assert sorted(p.relative_to(ckpt) for p in (ckpt / "region-a").rglob("*")) == before
    assert (ckpt / "region-b" / "group-0" / step_dir(40) / MARKER).exists()


@pytest.mark.parametrize("group_size", [1, 2])
def test_two_regions_train_with_diloco_through_the_tls_ring_and_commit(tmp_path: Path, group_size: int) -> None:
    """The driver as gkr runs it across regions: one group per "region", the Lighthouse and the ring over mTLS.

    With 2 ranks per group (FSDP2), rank 1's ring reaches the other region's rank 1 through the rendezvous of
    the store rank 0 serves (ft/manager.py ``_tls_ring``)."""
    steps = 8
    common = ("optim=diloco", "optim.sync_every=4", "ft.replica_groups=1", f"ft.group_size={group_size}")
    with guarded_lighthouse(tmp_path, min_replicas=2) as (lighthouse, proxy, member):
        tls = (f"ft.lighthouse={lighthouse}", f"ft.lighthouse_tls={member}", f"run.steps={steps}", *common)
        env = {ADVERTISE_HOST_ENV: HOST}
        launched = [start(tmp_path, f"region-{r}", *tls, f"ft.region={r}", env=env) for r in ("a", "b")]
        outputs = [proc.communicate(timeout=600)[0] for proc in launched]
    for proc, out in zip(launched, outputs, strict=True):
        assert proc.returncode == 0, out[-3000:]
    finals = [final(tmp_path, f"region-{r}", 0) for r in ("a", "b")]
    assert finals[0]["inner_steps"] == finals[1]["inner_steps"] == steps
    assert finals[0]["step"] == finals[1]["step"] == steps // 4  # one committed step per outer sync
    assert finals[0]["weights"] == finals[1]["weights"]  # the last outer step left both regions identical
    for r in ("a", "b"):
        logged = events(tmp_path, f"region-{r}", 0)
        assert all(e["participants"] == 2 for e in logged if e["event"] == "commit")
        assert max(e.get("bytes", 0) for e in logged if e["event"] == "step") > 0  # pseudo-gradients went out
    assert proxy.refused == 0
