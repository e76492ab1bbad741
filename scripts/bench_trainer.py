"""Benchmarks of the training driver, one section per subsystem.

checkpoint: how long training is blocked per checkpoint with the staged, asynchronous
`trainer.checkpoint.Checkpointer`, against a synchronous `torch.distributed.checkpoint.save` of the
same state to the same local disk. A training thread runs matmuls between checkpoints; every second
it spends inside a checkpoint call (waiting for the previous upload, staging) counts as blocked.
Target: blocked <= 10% of the synchronous save.

trust: what checkpoints you can trust cost: the sha256 read-back of every file of a step (done by the
commit thread before the marker, and again by verification on resume), and the finiteness check of
the state that save() makes on the training thread before staging.

stall: two replica groups, one SIGKILLed mid-run: how long the survivor commits nothing, and when the
restarted group has healed from it. comm: all-reduce bytes per inner step and held-out loss, DDP
against DiLoCo, on the reference task.

throughput: tokens/s and MFU of one replica group training the `small` model (25 M parameters) on this
machine's CPU, per logging window; MFU's denominator is this CPU's fp32 matmul rate, measured first (a
CPU has no catalog peak). recover: 2 groups x 2 ranks (FSDP2), one rank SIGKILLed: how long until its
restarted group has healed and committed again. blocked: checkpoint blocked time per rank of a 2 x 2
sharded run, from the `checkpoint_staged` event each rank writes.

ray_recover: the cluster path (run.launcher=ray, launch/ray_supervisor.py) on a local Ray cluster of a head and
three worker nodes: 2 groups of one rank, group 1's worker SIGKILLed (with one spare group and without),
or group 1's whole node killed (with a spare): from the death to the driver seeing it, to the replacement
actor running (the actor restart latency; a spare's is already up), to the other group's next commit, and
to the restarted group's first commit after it healed. Medians of --repeats runs per case.

    .venv/bin/python scripts/bench_trainer.py [--json] [--only SECTION] [--size-gb 1.0] [--repeats 3] [--levers]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter
from torch.distributed.checkpoint.staging import StagingOptions
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from trainer.checkpoint import Checkpointer, CheckpointEvent, nonfinite_tensors, staging_options
from trainer.observe.runs import final_event, read_events

TARGET_RATIO = 0.10
MATMUL = 1024  # the training thread's unit of work: one (MATMUL x MATMUL) @ (MATMUL x MATMUL)


# -- checkpoint ---------------------------------------------------------------------------------


def checkpoint_state(size_gb: float, tensors: int = 4) -> dict[str, Any]:
    """A model-sized state: a few large fp32 tensors (size_gb GiB in all) plus the small values a trainer saves."""
    numel = int(size_gb * 2**30) // 4 // tensors
    return {
        "model": {f"layer{i}.weight": torch.rand(numel) for i in range(tensors)},
        "manager": {"step": 0, "batches_committed": 0},
        "rng": torch.get_rng_state(),
    }


def state_bytes(state: dict[str, Any]) -> int:
    return sum(t.numel() * t.element_size() for t in state["model"].values())


class Trainer:
    """Stand-in for the training thread: matmuls for a given time, counting how many got done."""

    def __init__(self) -> None:
        self.a = torch.randn(MATMUL, MATMUL)
        self.b = torch.randn(MATMUL, MATMUL)

    def run(self, seconds: float) -> float:
        """Work for `seconds`; return matmuls per second."""
        done, start = 0, time.monotonic()
        while time.monotonic() - start < seconds:
            self.a = torch.tanh(self.a @ self.b)
            done += 1
        return done / (time.monotonic() - start)


def sync_save_seconds(state: dict[str, Any], root: Path, repeats: int) -> list[float]:
    """`torch.distributed.checkpoint.save` with the writer the Checkpointer uses (fsspec, fsync on)."""
    timings = []
    for i in range(repeats):
        start = time.monotonic()
        dcp_save(state, storage_writer=FsspecWriter(str(root / f"sync-{i}"), sync_files=True))
        timings.append(time.monotonic() - start)
    return timings


def async_checkpoints(
    state: dict[str, Any],
    root: Path,
    repeats: int,
    interval_s: float,
    staging: StagingOptions | None = None,
    write_threads: int = 1,
) -> dict[str, Any]:
    """Train, checkpoint, repeat; then train once more and wait for the last checkpoint to be durable.

    Checkpoint 0 is measured apart: it also allocates the stager's buffers, which later ones reuse.
    """
    trainer = Trainer()
    events: list[CheckpointEvent] = []
    blocked, rates = [], []
    with Checkpointer(str(root), keep=1, on_event=events.append, staging=staging, write_threads=write_threads) as ck:
        for step in range(repeats + 1):
            rates.append(trainer.run(interval_s))
            blocked.append(ck.save(step, state))
            state["manager"]["step"] = step
        rates.append(trainer.run(interval_s))
        start = time.monotonic()
        ck.wait()
        final_wait = time.monotonic() - start
    durable = [e.seconds for e in events if e.kind == "durable"]
    return {
        "first_blocked_s": blocked[0],
        "blocked_s": blocked[1:],
        "durable_s": durable[1:],
        "final_wait_s": final_wait,
        "matmuls_per_s": statistics.median(rates),
    }


def bench_checkpoint(
    size_gb: float = 1.0,
    repeats: int = 3,
    *,
    interval_s: float | None = None,
    levers: bool = False,
) -> dict[str, Any]:
    """Median synchronous save vs median time blocked per async checkpoint, for a state of `size_gb` GiB.

    The training interval defaults to three times the synchronous save (3 to 6 s): long enough for an
    upload to finish while the trainer keeps both cores busy, as with checkpoints minutes apart. If it
    does not finish, the next save() waits for it and that wait counts as blocked.
    """
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")  # single process on purpose
    state = checkpoint_state(size_gb)
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as tmp:
        root = Path(tmp)
        sync = statistics.median(sync_save_seconds(state, root / "sync", repeats))
        interval = interval_s if interval_s is not None else min(max(3.0, 3 * sync), 6.0)
        idle = Trainer()
        idle.run(0.5)  # warm up
        idle_rate = idle.run(interval)
        run = async_checkpoints(state, root / "async", repeats, interval)
        blocked = statistics.median(run["blocked_s"])
        result: dict[str, Any] = {
            "state_gib": round(state_bytes(state) / 2**30, 3),
            "sync_save_s": round(sync, 3),
            "blocked_s": round(blocked, 3),
            "blocked_ratio": round(blocked / sync, 3),
            "target_met": blocked / sync <= TARGET_RATIO,
            "blocked_each_s": [round(b, 3) for b in run["blocked_s"]],
            "first_blocked_s": round(run["first_blocked_s"], 3),
            "durable_s": round(statistics.median(run["durable_s"]), 3),
            "final_wait_s": round(run["final_wait_s"], 3),
            "interval_s": round(interval, 2),
            "train_rate_while_checkpointing": round(run["matmuls_per_s"] / idle_rate, 3),
            "staging": staging_name(staging_options()),
            "torch_threads": torch.get_num_threads(),
        }
        if levers:
            result["levers"] = try_levers(state, root, repeats, interval, sync)
    return result


def try_levers(state: dict[str, Any], root: Path, repeats: int, interval: float, sync: float) -> dict[str, Any]:
    """The knobs that could cut blocked time on a CPU host, each with the median blocked and durable seconds."""
    variants: dict[str, dict[str, Any]] = {
        "staging_in_caller_thread": {"staging": StagingOptions(False, False, False, False)},
        "staging_in_shared_memory": {"staging": StagingOptions(False, True, True, False)},
        "writer_threads_2": {"write_threads": 2},
    }
    out = {}
    for name, knobs in variants.items():
        run = async_checkpoints(state, root / name, repeats, interval, **knobs)
        blocked = statistics.median(run["blocked_s"])
        out[name] = {
            "blocked_s": round(blocked, 3),
            "blocked_ratio": round(blocked / sync, 3),
            "durable_s": round(statistics.median(run["durable_s"]), 3),
        }
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the trainer leaves a core to the upload (and does half the work)
    try:
        run = async_checkpoints(state, root / "one-torch-thread", repeats, interval)
    finally:
        torch.set_num_threads(threads)
    blocked = statistics.median(run["blocked_s"])
    out["torch_threads_1"] = {
        "blocked_s": round(blocked, 3),
        "blocked_ratio": round(blocked / sync, 3),
        "durable_s": round(statistics.median(run["durable_s"]), 3),
    }
    return out


def staging_name(options: StagingOptions) -> str:
    on = [name for name, value in vars(options).items() if value]
    return "+".join(on) or "none"


def bench_trust(size_gb: float = 1.0, repeats: int = 3) -> dict[str, Any]:
    """Median seconds of the checksum read-back of one step and of the finiteness check, for `size_gb` GiB."""
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    state = checkpoint_state(size_gb)
    finite = []
    for _ in range(repeats):
        start = time.monotonic()
        assert not nonfinite_tensors(state)
        finite.append(time.monotonic() - start)
    with tempfile.TemporaryDirectory(prefix="bench-trust-") as tmp:
        events: list[CheckpointEvent] = []
        with Checkpointer(tmp, keep=1, on_event=events.append) as ck:
            ck.save(1, state)
        durable = next(e.seconds for e in events if e.kind == "durable")
        sync = statistics.median(sync_save_seconds(state, Path(tmp) / "sync", 1))
        checksum = []
        for _ in range(repeats):
            with Checkpointer(tmp) as fresh:  # nothing remembered: reads and hashes every file
                start = time.monotonic()
                assert fresh.verify(1) is None
                checksum.append(time.monotonic() - start)
    gib = state_bytes(state) / 2**30
    return {
        "state_gib": round(gib, 3),
        "checksum_s": round(statistics.median(checksum), 3),
        "checksum_gib_per_s": round(gib / statistics.median(checksum), 2),
        "durable_s_with_checksum": round(durable, 3),
        "sync_save_s": round(sync, 3),
        "finite_check_s": round(statistics.median(finite), 4),
    }


# -- fault tolerance and communication: the real driver, as a user runs it -----------------------

TRAIN = Path(__file__).resolve().parent.parent / "platform/trainer/train.py"
CONFIG = TRAIN.parent / "configs/config.yaml"


def start_run(root: Path, name: str, *overrides: str) -> subprocess.Popen[bytes]:
    settings = [f"run.name={name}", f"run.report_dir={root}", f"checkpoint.dir={root}/checkpoints/{name}"]
    command = [sys.executable, str(TRAIN), str(CONFIG), *settings, "checkpoint.every=100000", *overrides]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def bench_stall(steps: int = 200, kill_at: int = 60) -> dict[str, Any]:
    """Kill one of two replica groups mid-run: how long the survivor stops committing, and how long healing takes."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        overrides = (f"run.steps={steps}", "run.log_every=1", "ft.replica_groups=2", "ft.heartbeat_timeout_ms=2000")
        proc = start_run(root, "stall", *overrides)
        while not any(e["event"] == "step" and e["step"] >= kill_at for e in read_events(root / "stall", 1)):
            if proc.poll() is not None:
                raise RuntimeError("the run ended before the kill")
            time.sleep(0.05)
        os.kill(json.loads((root / "stall/pids.json").read_text())["1"], signal.SIGKILL)
        killed = time.time()
        if proc.wait(timeout=600) != 0:
            raise RuntimeError("the run failed")
        times = [e["time"] for e in read_events(root / "stall", 0) if e["event"] == "step"]
        before = [b - a for a, b in itertools.pairwise(times) if b < killed]
        after = [t for t in times if t > killed]
        healed = [e["time"] for e in read_events(root / "stall", 1) if e["event"] == "healed" and e["time"] > killed]
        return {
            "step_seconds_median": round(statistics.median(before), 4),
            "stall_seconds": round(after[0] - killed, 3),
            "replacement_healed_after_seconds": round(healed[0] - killed, 3) if healed else None,
            "heartbeat_timeout_seconds": 2.0,
        }


def bench_comm(steps: int = 200, sync_every: int = 50) -> dict[str, Any]:
    """All-reduce bytes per inner step, DDP against DiLoCo, and the held-out loss each reaches."""
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        common = (f"run.steps={steps}", "ft.replica_groups=2", "ft.min_replicas=2")
        for name, algo in (("ddp", ("optim=ddp",)), ("diloco", ("optim=diloco", f"optim.sync_every={sync_every}"))):
            if start_run(root, name, *common, *algo).wait(timeout=900) != 0:
                raise RuntimeError(f"the {name} run failed")
            report = final_event(root / name, 0)
            assert report is not None
            figures[name] = {
                "bytes_per_step": round(report["bytes_sent"] / report["inner_steps"]),
                "loss": report["loss"],
            }
    figures["bytes_ratio"] = round(figures["ddp"]["bytes_per_step"] / figures["diloco"]["bytes_per_step"], 1)
    figures["loss_ratio"] = round(figures["diloco"]["loss"] / figures["ddp"]["loss"], 4)
    figures["sync_every"] = sync_every
    return figures


# -- at scale: throughput and MFU, sharded groups ---------------------------------------------------

SHARDED = ("ft.replica_groups=2", "ft.group_size=2", "data.batch_size=8", "ft.heartbeat_timeout_ms=2000")


def cpu_peak_gflops(n: int = 1024, seconds: float = 0.5, repeats: int = 5) -> float:
    """This CPU's fp32 matmul rate (GFLOPS), best of a few windows: the denominator of a CPU MFU."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b  # warm up
    best = 0.0
    for _ in range(repeats):
        done, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            a @ b
            done += 1
        best = max(best, 2 * n**3 * done / (time.perf_counter() - start) / 1e9)
    return best


def bench_throughput(model: str = "small", steps: int = 12, batch_size: int = 2) -> dict[str, Any]:
    """tokens/s and MFU per logging window of one group (no torchft), median over the windows after the first."""
    peak = cpu_peak_gflops()
    with tempfile.TemporaryDirectory(prefix="bench-tput-") as tmp:
        root = Path(tmp)
        overrides = (
            f"model={model}", f"run.steps={steps}", "run.log_every=2", f"data.batch_size={batch_size}",
            "ft.enabled=false", "ft.replica_groups=1", f"perf.peak_tflops={peak / 1000}",
        )  # fmt: skip
        if start_run(root, "tput", *overrides).wait(timeout=900) != 0:
            raise RuntimeError("the throughput run failed")
        windows = [e for e in read_events(root / "tput", 0) if e["event"] == "step"][1:]  # the first warms up
    if not windows:
        raise RuntimeError("the throughput run logged no window after the first")
    return {
        "model": model,
        "batch_size": batch_size,
        "cpu_peak_fp32_gflops": round(peak, 1),
        "tokens_per_s": round(statistics.median(e["tokens_per_s"] for e in windows), 1),
        "mfu_vs_cpu_peak": round(statistics.median(e["mfu"] for e in windows), 4),
        "windows": len(windows),
        "torch_threads": torch.get_num_threads(),
    }


def rank_events(run: Path, group: int, rank: int) -> list[dict[str, Any]]:
    """One rank's events: rank 0 writes the group's log, the others ranks/events-<group>-<rank>.jsonl."""
    if rank == 0:
        return read_events(run, group)
    path = run / "ranks" / f"events-{group}-{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def recover_once(root: Path, name: str, steps: int, kill_at: int) -> dict[str, float]:
    proc = start_run(root, name, f"run.steps={steps}", "run.log_every=1", "ft.restart_delay_s=2", *SHARDED)
    deadline = time.monotonic() + 300
    while not any(e["event"] == "step" and e["step"] >= kill_at for e in read_events(root / name, 1)):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("the run ended (or stalled) before the kill")
        time.sleep(0.05)
    ranks = json.loads((root / name / "ranks.json").read_text())
    os.kill(ranks["1"][1], signal.SIGKILL)  # rank 1 of group 1: the launcher takes the whole group down
    killed = time.time()
    if proc.wait(timeout=600) != 0:
        raise RuntimeError("the recover run failed")
    after = [e for e in read_events(root / name, 1) if e["time"] > killed]
    started = next(e["time"] for e in after if e["event"] == "started")
    healed = next((e["time"] for e in after if e["event"] == "healed"), None)
    if healed is None:
        raise RuntimeError("the restarted group never healed (the survivor finished first: raise steps)")
    committed = next(e["time"] for e in after if e["event"] == "commit" and e["time"] >= healed)
    return {"started": started - killed, "healed": healed - killed, "committed": committed - killed}


def bench_recover(repeats: int = 1, steps: int = 400, kill_at: int = 20) -> dict[str, Any]:
    """SIGKILL one rank of a 2-rank group: seconds until the group restarted, healed, and committed again.

    `steps` leaves the survivor (about 10 tiny steps/s alone here) enough to do while the group restarts
    (about 10 s: the restart delay, then two processes importing torch on two cores); if it finished first, the
    restarted group would train alone with no one to heal from.
    """
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-recover-") as tmp:
        for i in range(repeats):
            runs.append(recover_once(Path(tmp), f"recover{i}", steps, kill_at))
    return {
        "restarted_s": round(statistics.median(r["started"] for r in runs), 2),
        "healed_s": round(statistics.median(r["healed"] for r in runs), 2),
        "committed_again_s": round(statistics.median(r["committed"] for r in runs), 2),
        "committed_again_each_s": [round(r["committed"], 2) for r in runs],
        "restart_delay_s": 2.0,
        "heartbeat_timeout_s": 2.0,
    }


def blocked_per_rank(root: Path, name: str, model: str, steps: int, every: int, group_size: int) -> dict[str, Any]:
    shape = ("ft.replica_groups=2", f"ft.group_size={group_size}", "data.batch_size=8", "ft.heartbeat_timeout_ms=2000")
    # start_run's checkpoint.every comes first: the later override wins.
    overrides = (f"model={model}", f"run.steps={steps}", f"checkpoint.every={every}", *shape)
    if start_run(root, name, *overrides).wait(timeout=900) != 0:
        raise RuntimeError(f"the {name} run failed")
    figures: dict[str, Any] = {}
    for group, rank in itertools.product((0, 1), range(group_size)):
        log = rank_events(root / name, group, rank)
        staged = [e["seconds"] for e in log if e["event"] == "checkpoint_staged"]
        durable = [e["seconds"] for e in log if e["event"] == "checkpoint_durable"]
        if not staged:
            raise RuntimeError(f"group {group} rank {rank} wrote no checkpoint_staged event")
        figures[f"group{group}_rank{rank}"] = {
            "blocked_s": round(statistics.median(staged), 4),
            "blocked_each_s": [round(b, 3) for b in staged],
            "durable_s": round(statistics.median(durable), 4) if durable else None,
        }
    return figures


def bench_blocked(model: str = "tiny", steps: int = 60, every: int = 10) -> dict[str, Any]:
    """Checkpoint blocked seconds per rank of a 2 x 2 sharded run (each rank stages its own shards), and 2 x 1 beside it."""
    with tempfile.TemporaryDirectory(prefix="bench-blocked-") as tmp:
        return {
            "model": model,
            "checkpoints": steps // every,
            "2x2": blocked_per_rank(Path(tmp), "sharded", model, steps, every, 2),
            "2x1": blocked_per_rank(Path(tmp), "unsharded", model, steps, every, 1),
        }


# -- ray_recover ----------------------------------------------------------------------------------

RAY_CASES = {"worker_spare": ("worker", 1), "worker_no_spare": ("worker", 0), "node_spare": ("node", 1)}


def ray_recover_once(cluster: Any, root: Path, name: str, kill: str, spares: int, steps: int) -> dict[str, float]:
    overrides = (
        "run.launcher=ray", f"run.steps={steps}", "run.log_every=1", f"ft.spare_groups={spares}",
        "ft.restart_delay_s=2", "ft.heartbeat_timeout_ms=2000", "ft.timeout_s=10", "run.metrics_port=0",
    )  # fmt: skip
    settings = [f"run.name={name}", f"run.report_dir={root}", f"checkpoint.dir={root}/checkpoints/{name}"]
    command = [sys.executable, str(TRAIN), str(CONFIG), *settings, "checkpoint.every=100000", *overrides]
    env = os.environ | {"RAY_ADDRESS": cluster.address}
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    out = root / name
    deadline = time.monotonic() + 300
    while not any(e["event"] == "commit" and e["step"] >= 8 for e in read_events(out, 1)):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("the run ended (or stalled) before the kill")
        time.sleep(0.05)
    where = json.loads((out / "placement.json").read_text())["1"]
    if kill == "worker":
        os.kill(where["pids"][0], signal.SIGKILL)
    else:
        cluster.remove_node(next(n for n in cluster.worker_nodes if n.node_id == where["node"]), allow_graceful=False)
    killed = time.time()
    if proc.wait(timeout=600) != 0:
        raise RuntimeError(f"the {name} run failed")
    if kill == "node":
        cluster.add_node(num_cpus=1)  # the repaired node: the next run has three again
        cluster.wait_for_nodes()
    supervisor = [e for e in read_events_file(out / "supervisor.jsonl") if e["time"] > killed and e["group"] == 1]
    after = [e for e in read_events(out, 1) if e["time"] > killed]
    healed = next((e["time"] for e in after if e["event"] == "healed"), None)
    if healed is None:
        raise RuntimeError("the restarted group never healed (the survivor finished first: raise steps)")
    return {
        "detected": next(e["time"] for e in supervisor if e["event"] == "lost") - killed,
        "actor_running": next(e["time"] for e in supervisor if e["event"] == "placed") - killed,
        "others_committed": next(
            e["time"] for e in read_events(out, 0) if e["event"] == "commit" and e["time"] > killed
        )
        - killed,
        "training": next(e["time"] for e in supervisor if e["event"] == "training") - killed,
        "healed": healed - killed,
        "committed_after_heal": next(e["time"] for e in after if e["event"] == "commit" and e["time"] >= healed)
        - killed,
    }


def read_events_file(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def bench_ray_recover(repeats: int = 5, steps: int = 300) -> dict[str, Any]:
    """Group-level recovery on a local Ray cluster of several nodes (one head without CPUs, three workers)."""
    from ray.cluster_utils import Cluster

    # Ray marks a killed raylet dead after threshold x period of failed health checks (defaults 5 x 3 s; shorter
    # here); a vanished host takes up to 5 x (10 s timeout + 3 s): fleet.goodput.nodeloss.
    os.environ |= {"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "3"}
    cluster: Any = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    figures: dict[str, Any] = {}
    try:
        for _ in range(3):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        with tempfile.TemporaryDirectory(prefix="bench-ray-recover-") as tmp:
            for case, (kill, spares) in RAY_CASES.items():
                runs = [ray_recover_once(cluster, Path(tmp), f"{case}{i}", kill, spares, steps) for i in range(repeats)]
                figures[case] = {key: round(statistics.median(r[key] for r in runs), 2) for key in runs[0]} | {
                    "committed_after_heal_each_s": [round(r["committed_after_heal"], 2) for r in runs]
                }
    finally:
        cluster.shutdown()
    return figures | {"restart_delay_s": 2.0, "heartbeat_timeout_s": 2.0, "ray_health_check_s": "0.5 x 3"}


# -- driver -------------------------------------------------------------------------------------

SECTIONS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "checkpoint": lambda args: bench_checkpoint(args.size_gb, args.repeats, levers=args.levers),
    "trust": lambda args: bench_trust(args.size_gb, args.repeats),
    "stall": lambda args: bench_stall(),
    "comm": lambda args: bench_comm(),
    "throughput": lambda args: bench_throughput(),
    "recover": lambda args: bench_recover(args.repeats),
    "blocked": lambda args: bench_blocked(),
    "ray_recover": lambda args: bench_ray_recover(args.repeats),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    parser.add_argument("--only", choices=sorted(SECTIONS), action="append", help="run only these sections")
    parser.add_argument("--size-gb", type=float, default=1.0, help="checkpoint state size in GiB")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--levers", action="store_true", help="also try the staging and writer knobs")
    args = parser.parse_args(argv)
    results = {name: run(args) for name, run in SECTIONS.items() if not args.only or name in args.only}
    if args.json:
        print(json.dumps(results))
    else:
        for section, figures in results.items():
            for name, value in flatten(figures):
                print(f"{section}.{name}: {value}")
    return 0


def flatten(figures: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    lines: list[tuple[str, Any]] = []
    for name, value in figures.items():
        if isinstance(value, dict):
            lines += flatten(value, f"{prefix}{name}.")
        else:
            lines.append((f"{prefix}{name}", value))
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
