"""Checkpoints across processes: a replica group of two gloo ranks checkpoints together (each rank its shard,
rank 0 the marker, a non-finite shard anywhere refused on every rank), and a trainer process that dies between
staged and durable leaves the previous checkpoint. Live: each test starts its processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from trainer.checkpoint import MARKER, Checkpointer, step_dir

from tests.trainer.test_checkpoint import committed, step_dirs

pytestmark = pytest.mark.live  # each test starts its processes


TWO_RANK_GROUP = textwrap.dedent(
    """
    import json, sys
    import torch
    import torch.distributed as dist
    from trainer.checkpoint import Checkpointer

    root, rendezvous, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
    group = dist.new_group([0, 1], backend="gloo")
    events, markers = [], []
    write_marker = Checkpointer._write_marker
    Checkpointer._write_marker = lambda self, step: markers.append(step) or write_marker(self, step)
    checkpoints = Checkpointer(root, keep=1, process_group=group, on_event=lambda e: events.append([e.kind, e.step]))
    for step in (1, 2):
        mine = torch.full((64,), float(10 * step + rank))
        checkpoints.save(step, {f"rank{rank}": mine, "data": {"next_batch": step}})
        mine.fill_(-1.0)
    checkpoints.wait()
    dist.barrier(group)
    latest = checkpoints.latest()
    loaded = {f"rank{rank}": torch.zeros(64), "data": {"next_batch": 0}}
    checkpoints.load(latest, loaded)
    checkpoints.close()
    mine = loaded[f"rank{rank}"][0].item()
    print(json.dumps({"latest": latest, "mine": mine, "data": loaded["data"], "events": events, "markers": markers}))
    dist.destroy_process_group()
    """
)


def _two_ranks(program: str, root: Path, rendezvous: Path) -> list[dict[str, Any]]:
    """Run ``program`` as ranks 0 and 1 of a gloo group; each prints a JSON report as its last line."""
    ranks = [
        subprocess.Popen(
            [sys.executable, "-W", "ignore", "-c", program, str(root), str(rendezvous), str(rank)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    reports = []
    for rank, proc in enumerate(ranks):
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, f"rank {rank}: {err[-3000:]}"
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


def test_a_gloo_replica_group_checkpoints_together(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    reports = _two_ranks(TWO_RANK_GROUP, root, tmp_path / "rendezvous")
    for rank, report in enumerate(reports):
        assert report["latest"] == 2
        assert report["mine"] == 20 + rank
        assert report["data"] == {"next_batch": 2}
        assert report["events"] == [["staged", 1], ["durable", 1], ["staged", 2], ["durable", 2]]
        assert report["markers"] == ([1, 2] if rank == 0 else [])  # rank 0 of the group commits
    assert step_dirs(root) == [2]  # keep=1
    files = sorted(os.listdir(root / step_dir(2)))
    assert files == [".metadata", MARKER, "__0_0.distcp", "__1_0.distcp"]


SHARDED_NONFINITE = textwrap.dedent(
    """
    import json, sys
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from trainer.checkpoint import Checkpointer, CheckpointError

    root, rendezvous, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    group = dist.new_group([0, 1], backend="gloo")
    full = torch.ones(8, 4)
    full[6, 1] = float("nan")  # in rank 1's half only
    sharded = {"model": {"w": distribute_tensor(full, mesh, [Shard(0)]), "b": torch.ones(3)}}
    reductions = []
    all_reduce = dist.all_reduce
    dist.all_reduce = lambda *a, **k: reductions.append(1) or all_reduce(*a, **k)
    checkpoints = Checkpointer(root, process_group=group)
    try:
        checkpoints.save(5, sharded)
        refused = None
    except CheckpointError as error:
        refused = str(error)
    dist.all_reduce = all_reduce
    fine = {"model": {"w": distribute_tensor(torch.ones(8, 4), mesh, [Shard(0)]), "b": torch.ones(3)}}
    checkpoints.save(6, fine)  # nothing stuck in flight, the ranks still in step
    checkpoints.wait()
    dist.barrier(group)  # rank 0 has written the marker
    latest = checkpoints.latest()
    checkpoints.close()
    print(json.dumps({"refused": refused, "reductions": len(reductions), "latest": latest}))
    dist.destroy_process_group()
    """
)


def test_a_nonfinite_shard_on_one_rank_is_refused_on_every_rank_of_the_group(tmp_path: Path) -> None:
    """Each rank checks its own shard; the group agrees in one all-reduce, not one collective per tensor."""
    root = tmp_path / "ckpt"
    reports = _two_ranks(SHARDED_NONFINITE, root, tmp_path / "rendezvous")
    assert reports[1]["refused"] == "refusing to checkpoint step 5: non-finite values in model.w"
    assert reports[0]["refused"] == (
        "refusing to checkpoint step 5: non-finite values in 1 tensor(s) on another rank of the group"
    )
    assert [r["reductions"] for r in reports] == [1, 1]
    assert [r["latest"] for r in reports] == [6, 6]
    assert step_dirs(root) == [6]


CRASHING_TRAINER = textwrap.dedent(
    """
    import os, signal, sys
    import torch
    from trainer.checkpoint import Checkpointer

    root, when = sys.argv[1], sys.argv[2]
    die = lambda *_: os.kill(os.getpid(), signal.SIGKILL)
    if when == "before-marker":  # the files are all written, the marker is next
        write_marker = Checkpointer._write_marker
        Checkpointer._write_marker = lambda self, step: die() if step == 2 else write_marker(self, step)
    on_event = (lambda e: die() if e.kind == "staged" and e.step == 2 else None) if when == "staged" else None
    checkpoints = Checkpointer(root, on_event=on_event)
    checkpoints.save(1, {"w": torch.full((1024,), 1.0), "data": {"next_batch": 10}})
    checkpoints.wait()
    checkpoints.save(2, {"w": torch.full((1024,), 2.0), "data": {"next_batch": 20}})
    checkpoints.wait()
    print("survived")
    """
)


@pytest.mark.parametrize("when", ["staged", "before-marker"])
def test_a_crash_between_staged_and_durable_leaves_the_previous_checkpoint(tmp_path: Path, when: str) -> None:
    run = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", CRASHING_TRAINER, str(tmp_path), when],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == -9, run.stdout + run.stderr
    if when == "before-marker":
        assert (tmp_path / step_dir(2) / ".metadata").exists()  # even complete files do not count
    assert committed(tmp_path) == [1]

    checkpoints = Checkpointer(str(tmp_path))
    assert checkpoints.latest() == 1
    loaded: dict[str, Any] = {"w": torch.zeros(1024), "data": {"next_batch": 0}}
    checkpoints.load(1, loaded)
    assert torch.equal(loaded["w"], torch.full((1024,), 1.0))
    assert loaded["data"] == {"next_batch": 10}
    with pytest.raises(FileNotFoundError):
        checkpoints.load(2, loaded)

    checkpoints.save(3, {"w": torch.full((1024,), 3.0), "data": {"next_batch": 30}})
    checkpoints.wait()
    assert step_dirs(tmp_path) == [1, 3]  # the dead attempt is cleaned up by the next commit
    checkpoints.close()
