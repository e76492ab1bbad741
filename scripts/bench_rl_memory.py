"""Benchmark: what the RL weight sync holds, per trainer rank and per generator worker, measured on CPU.

A sharded trainer group (``ft.group_size`` 2: FSDP2 over gloo) takes the sync's snapshot (weight_sync.snapshot:
bf16, bucket by bucket, each tensor gathered from the shards) and its rank 0 sends it (WeightSync.send over a
pair met in a TCP store this script hosts, as the controller does) to one generator of tensor parallel 2: the
fake vLLM (tests/rl/fake_vllm.py), whose two workers are the real worker extension, each receiving every bucket
and keeping its slice as vLLM's loaders do. Each process records its peak RSS growth (VmHWM, reset through
/proc/self/clear_refs), beside the facts the sync records: the bytes
kept, the largest tensor gathered, the receive buffer, the most handed to one load, the slice held. A trainer
rank's peak is counted from its sharded model (its training state) through two versions; rank 0 keeps the
previous snapshot while it takes the next, as WeightServer does while a send may be in flight. A generator's is
counted from its engine through two versions, less the weights the fake makes at its first load (vLLM's exist
from its start). The path this
replaced is measured on the same ranks: the whole fp32 model gathered on every rank and cloned.

From those bytes per parameter, what 8B and 70B take at the default bucket (configs/model/*.yaml; the RL README's
"Memory" table is this script's output).

    .venv/bin/python scripts/bench_rl_memory.py [--sizes tiny,small] [--bucket-mb 4]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
import yaml

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "platform/trainer/configs/model"
WIRE = torch.bfloat16  # the GPU wire's dtype (pairs.wire), measured here over gloo
TP, GROUP = 2, 2
PAIR = "bench"


def model_config(size: str) -> Any:
    from trainer.config import Model

    return Model(**(yaml.safe_load((MODELS / f"{size}.yaml").read_text()) | {"precision": "fp32"}))


def rss() -> int:
    """(current RSS, peak RSS since the last reset) of this process, bytes."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) << 10


def peak() -> int:
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["VmHWM"].split()[0]) << 10


def reset_peak() -> int:
    """Start a new peak (Linux: clear_refs 5 resets VmHWM); returns the RSS it starts from."""
    Path("/proc/self/clear_refs").write_text("5")
    return rss()


def _trainer(rank: int, size: str, bucket_bytes: int, store: str, port: int, out: str) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from trainer.model.transformer import LanguageModel
    from trainer.rl.pairs import pair_group
    from trainer.rl.weight_sync import WeightSync, layout, snapshot

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=GROUP)
    torch.manual_seed(0)
    model = LanguageModel(model_config(size))
    mesh = init_device_mesh("cpu", (GROUP,))
    for block in model.blocks:  # as distributed/group.shard: each block a unit, then the rest
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    start = reset_peak()  # from the sharded model on: everything the sync adds, buffers and pair included
    buckets, _ = layout(model.state_dict(), WIRE, bucket_bytes)
    sender = WeightSync(model.state_dict(), src=0, dtype=WIRE, bucket_bytes=bucket_bytes) if rank == 0 else None
    pair = pair_group("127.0.0.1", port, PAIR, 0, 300.0, torch.device("cpu"), world=1 + TP) if rank == 0 else None
    served = None  # WeightServer.latest: the snapshot a send may still be reading while the next is taken
    for version in (1, 2):
        dist.barrier()
        taken = snapshot(buckets, model.state_dict(), WIRE, keep=rank == 0)  # every rank: the gathers
        if sender is not None:
            sender.send(taken, version, group=pair)
        served = taken
    sync_peak = peak() - start
    assert served is not None
    dist.barrier()
    start = reset_peak()
    options = StateDictOptions(full_state_dict=True)
    whole = {k: cast(torch.Tensor, v).detach().clone() for k, v in get_model_state_dict(model, options=options).items()}
    before_peak = peak() - start
    del whole
    record = {
        "params": sum(p.numel() for p in model.parameters()),
        "sync_peak": sync_peak,
        "kept": sum(t.numel() * t.element_size() for t in served.buckets),
        "gathered": served.gathered_bytes,
        "buffer": 0 if sender is None else sender.buffer_bytes,
        "buckets": len(buckets),
        "before_peak": before_peak,
    }
    Path(out, f"rank{rank}.json").write_text(json.dumps(record))
    dist.destroy_process_group()


def _generator(size: str, bucket_bytes: int, port: int, folder: str, out: str) -> None:
    sys.path.insert(0, str(REPO))
    from trainer.model.transformer import LanguageModel
    from trainer.rl import hf
    from trainer.rl.pairs import prefix
    from trainer.rl.vllm_engine import VllmGenerator

    from tests.rl.fake_vllm import Engine, fake_vllm, model_of, tp_slice

    torch.set_num_threads(1)
    recorded = Engine()
    sys.modules["vllm"] = fake_vllm(recorded)
    engine = VllmGenerator(folder, version=0, tensor_parallel_size=TP)
    start = reset_peak()  # from here: the receive buffers, the pair, and the fake's weights (made by the first load)
    engine.open_sync("127.0.0.1", port, backend="gloo", prefix=prefix(PAIR), wire_dtype="bfloat16",
                     timeout_s=300.0, bucket_bytes=bucket_bytes)  # fmt: skip
    assert engine.receive() == 1  # the fake's weights exist from here (vLLM's from its start): subtracted below
    assert engine.receive() == 2
    workers = [
        {
            "rank": w.rank,
            "buffer": w._meridian_sync[0].buffer_bytes,
            "largest_load": model_of(w).largest_call,
            "held": model_of(w).held,
        }
        for w in recorded.workers
    ]
    grown = peak() - start - sum(w["held"] for w in workers)  # what the sync added beyond the weights
    # The trainer's weights (seed 0, not trained here) cast to the wire dtype: each worker holds its slice of them.
    torch.manual_seed(0)
    sent = {hf.to_hf(k): v.to(WIRE) for k, v in LanguageModel(model_config(size)).state_dict().items()}
    exact = all(
        torch.equal(model_of(w).loaded[name], tp_slice(name, tensor, w.rank, TP, model_config(size)))
        for w in recorded.workers
        for name, tensor in sent.items()
    )
    Path(out, "generator.json").write_text(json.dumps({"sync_peak": grown, "workers": workers, "exact": exact}))


# Every allocation of 64 KiB or more is its own mapping, returned to the system when freed: glibc's default raises
# that threshold to the largest block freed (up to 32 MiB) and then keeps freed buffers in its heap, where RSS
# would count memory the process no longer holds.
MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(64 << 10)}


def measure(size: str, bucket_bytes: int) -> dict[str, Any]:
    from trainer.model.transformer import LanguageModel
    from trainer.rl import hf
    from trainer.rl.generate import snapshot

    cfg = model_config(size)
    with tempfile.TemporaryDirectory() as folder:
        hf.save_hf(snapshot(LanguageModel(cfg)), cfg, Path(folder, "start"), dtype=WIRE)  # the engine's start
        host = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)  # type: ignore[attr-defined]
        spawn = multiprocessing.get_context("spawn")
        members = [
            spawn.Process(target=_trainer, args=(r, size, bucket_bytes, f"{folder}/store", host.port, folder))
            for r in range(GROUP)
        ]
        members.append(
            spawn.Process(target=_generator, args=(size, bucket_bytes, host.port, str(Path(folder, "start")), folder))
        )
        os.environ.update(MALLOC)  # read by each spawned process's C library at its start
        for member in members:
            member.start()
        codes = []
        for member in members:  # the trainer ranks, then the generator
            member.join(timeout=600)
            codes.append(member.exitcode)
        if codes != [0] * len(members):
            sys.exit(f"bench_rl_memory: the {size} run failed (exit codes {codes}: trainer ranks, generator)")
        ranks = [json.loads(Path(folder, f"rank{r}.json").read_text()) for r in range(GROUP)]
        generator = json.loads(Path(folder, "generator.json").read_text())
    return {"size": size, "bucket_bytes": bucket_bytes, "ranks": ranks, "generator": generator}


def largest_tensor_bytes(size: str) -> int:
    """The model's largest tensor in the wire dtype (the embedding or the head): no bucket is smaller."""
    from trainer.rl import hf

    return 2 * max(int(torch.Size(s).numel()) for s in hf.shapes(model_config(size)).values())


def rates(small: dict[str, Any], large: dict[str, Any]) -> dict[str, float]:
    """The measured rules, from two sizes, so that what does not grow with the model (the process's gloo pair,
    threads) cancels: bytes per parameter for what grows with the model, and multiples of the recorded gather
    for what grows with its largest tensor; the buckets and buffers themselves are recorded, not fitted."""

    def sender_part(row: dict[str, Any]) -> float:  # the sending rank, less its buffer and its gather
        rank = row["ranks"][0]
        return float(rank["sync_peak"] - rank["buffer"] - rank["gathered"])

    def generator_part(row: dict[str, Any]) -> float:  # one worker, less its receive buffer
        return float(row["generator"]["sync_peak"] - sum(w["buffer"] for w in row["generator"]["workers"])) / TP

    params = large["ranks"][0]["params"] - small["ranks"][0]["params"]
    other_gather = large["ranks"][1]["gathered"] - small["ranks"][1]["gathered"]
    workers = large["generator"]["workers"]
    return {
        "rank0_host_per_param": (sender_part(large) - sender_part(small)) / params,
        "rank_other_per_gather": (large["ranks"][1]["sync_peak"] - small["ranks"][1]["sync_peak"]) / other_gather,
        "worker_weights_per_param": statistics.mean(w["held"] for w in workers) * TP / large["ranks"][0]["params"],
        "worker_other_per_param": (generator_part(large) - generator_part(small)) / params,
        "before_rank_per_param": max(
            (large["ranks"][r]["before_peak"] - small["ranks"][r]["before_peak"]) / params for r in range(GROUP)
        ),
    }


def planned(size: str, ranks: int, tp: int, bucket_bytes: int, rule: dict[str, float]) -> dict[str, float]:
    """GB the sync adds at ``size`` with trainer groups of ``ranks`` and generators of ``tp`` GPUs, by ``rule``.

    A rank's gather is its shard of the largest tensor, padded, cast (tensor / ranks); rank 0 also receives the
    whole tensor, and on a GPU stages each bucket for NCCL from the host snapshot (on CPU nothing is staged: that
    term is the rule, not a measurement).
    """
    from trainer.model.flops import parameters

    params = parameters(model_config(size)).total
    tensor = largest_tensor_bytes(size)
    bucket = max(bucket_bytes, tensor)  # a tensor larger than a bucket travels alone
    shard = tensor / ranks
    weights = rule["worker_weights_per_param"] * params / tp
    return {
        "params_b": params / 1e9,
        "rank0_host_gb": rule["rank0_host_per_param"] * params / 1e9,
        "rank0_gpu_gb": (bucket + tensor + shard) / 1e9,
        "rank_gpu_gb": rule["rank_other_per_gather"] * shard / 1e9,
        "generator_weights_gb": weights / 1e9,
        "generator_sync_gb": (bucket + max(0.0, rule["worker_other_per_param"]) * params) / 1e9,
        "before_rank_gb": rule["before_rank_per_param"] * params / 1e9,
        "before_generator_sync_gb": 2 * params / 1e9,  # the whole model's receive buffer in every worker
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="tiny,small", help="two or more, smallest first: the rules are fitted")
    parser.add_argument(
        "--bucket-mb", type=float, default=4.0, help="the sync bucket here (the run's: rl.sync_bucket_mb)"
    )
    args = parser.parse_args()
    sizes = args.sizes.split(",")
    if len(sizes) < 2:
        sys.exit("bench_rl_memory: --sizes needs two sizes or more, smallest first (the fit cancels fixed costs)")
    rows = [measure(size, int(args.bucket_mb * (1 << 20))) for size in sizes]
    for row in rows:
        print(json.dumps(row))
    rule = rates(rows[0], rows[-1])
    print(json.dumps({"rule": {k: round(v, 3) for k, v in rule.items()}}))
    # The README's plan: groups of 8 at 8B (grpo-8b.yaml), of 32 at 70B (4 pods); vLLM at TP 2 and 4.
    for size, ranks, tp in (("8b", 8, 2), ("70b", 32, 4)):
        plan = planned(size, ranks, tp, 1 << 30, rule)
        row = {"planned": size, "group_size": ranks, "tp": tp, "bucket_mb": 1024}
        print(json.dumps(row | {k: round(v, 2) for k, v in plan.items()}))


if __name__ == "__main__":
    main()
