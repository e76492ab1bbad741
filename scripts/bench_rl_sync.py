"""Benchmark: RL weight sync on CPU, trainer -> generators over gloo (trainer.rl.weight_sync), the same code
path NCCL takes on GPU. One sending rank and N receiving ranks on this machine; for each model size,
the median seconds per version over --versions syncs (snapshot excluded: it is the trainer's copy),
and the effective rate (bytes / seconds). Two transports: ``broadcast`` (one group of 1 + N members)
and ``pairs`` (what the distributed run does, rl/pairs.py: a group of two per generator over a TCP store
hosted elsewhere, the sender serving them one after another). A measurement of this machine's loopback,
not of the GPU network: the cost model for a3-ultragpu-8g is in platform/trainer/src/trainer/rl/README.md.

    .venv/bin/python scripts/bench_rl_sync.py [--generators 2] [--versions 5] [--sizes tiny,small]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import yaml

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "platform/trainer/configs/model"


def _member(rank: int, world: int, store: str, size: str, versions: int, out: str, pairs: int) -> None:
    """Rank ``rank``: the sender (0) or a generator; ``pairs``: the port of the store the pairs meet in (0: broadcast)."""
    from trainer.config import Model
    from trainer.model.transformer import LanguageModel
    from trainer.rl.weight_sync import WeightSync, open_group

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    cfg = Model(**(yaml.safe_load((MODELS / f"{size}.yaml").read_text()) | {"precision": "fp32"}))
    model = LanguageModel(cfg)
    sync = WeightSync(model.state_dict(), src=0)
    groups = {}
    if pairs:  # as pairs.pair_group: one group of two per generator, built once, kept for every version
        for generator in range(1, world) if rank == 0 else [rank]:
            groups[generator] = open_group("localhost", pairs, int(rank != 0), 2, backend="gloo", timeout_s=120,
                                           prefix=f"pair/{generator}", host_store=False)  # fmt: skip
    seconds = []
    for version in range(1, versions + 1):
        state = sync.snapshot(model.state_dict()) if rank == 0 else None
        dist.barrier()
        start = time.perf_counter()
        if state is not None:
            for group in groups.values() or [None]:
                sync.send(state, version, group=group)
        else:
            sync.receive(lambda bucket: None, group=groups.get(rank))  # the wire only: no engine to load into
        seconds.append(time.perf_counter() - start)
    if rank == 0:
        Path(out).write_text(json.dumps({"seconds": seconds, "bytes": sum(b.numel for b in sync.buckets) * 4}))
    dist.destroy_process_group()


def measure(size: str, generators: int, versions: int, pairs: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        # The pairs' store, hosted here as the controller hosts it in a run.
        host = dist.TCPStore("localhost", 0, is_master=True, wait_for_workers=False) if pairs else None  # type: ignore[attr-defined]
        spawn = multiprocessing.get_context("spawn")
        world = generators + 1
        port = host.port if host is not None else 0
        args = [(r, world, f"{folder}/store", size, versions, f"{folder}/out.json", port) for r in range(world)]
        members = [spawn.Process(target=_member, args=a) for a in args]
        for member in members:
            member.start()
        for member in members:
            member.join(timeout=600)
        if any(m.exitcode != 0 for m in members):
            sys.exit(f"bench_rl_sync: a member of the {size} run failed")
        found = json.loads(Path(folder, "out.json").read_text())
    median = statistics.median(found["seconds"])
    return {"bytes": found["bytes"], "median_s": median, "gb_per_s": found["bytes"] / median / 1e9}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generators", type=int, default=2)
    parser.add_argument("--versions", type=int, default=5)
    parser.add_argument("--sizes", default="tiny,small")
    args = parser.parse_args()
    print(f"weight sync over gloo, 1 sender -> {args.generators} generators, median of {args.versions} versions")
    for size in args.sizes.split(","):
        for transport in ("broadcast", "pairs"):
            row = measure(size, args.generators, args.versions, transport == "pairs")
            print(
                f"{size:6s} {transport:9s} {row['bytes'] / 1e6:9.1f} MB  {row['median_s'] * 1000:9.1f} ms  "
                f"{row['gb_per_s']:6.2f} GB/s"
            )


if __name__ == "__main__":
    main()
