"""GPU measurements of the trainer: MFU of the `1b` model on one GPU, and checkpoint staging GB/s.

mfu: the trainer's own `LanguageModel` at `model=1b` (configs/model/1b.yaml; precision auto = bf16 autocast on
CUDA, fp32 parameters and AdamW state) with the trainer's step (forward, loss with an fp32 softmax, backward,
gradient norm and clipping, AdamW, `.item()` of loss and norm as the non-finite guard reads them), eager,
sequence 8192, for a few batch sizes; tokens/s from the median of timed steps after warm-up, MFU = FLOPs per
token (model/flops.py: 6N + 12LHQT) x tokens/s / peak. The peak is the catalog's dense bf16 for an H200 (989 TFLOPS;
`--peak-tflops`). One GPU, no FSDP, no torchft: the single-rank ceiling of the driver's model code.

staging: the trainer's `Checkpointer` saving the `1b` model and its AdamW state (about 24 GB) from the GPU to a
local directory: seconds the caller is blocked until the state is staged into pinned host memory, as GB/s,
for the first save (pinned buffers allocated) and the second (buffers reused), and the time until durable
(files written, read back for the manifest's sha256, marker written).

    python scripts/bench_trainer_gpu.py [--json] [--peak-tflops 989] [--batches 1,2,4] [--dir /dev/shm/ckpt]

Needs only torch, fsspec and PyYAML beside the repo's sources (it runs on a bare GPU machine's python).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "platform/contract/src"), str(ROOT / "platform/trainer/src")]

import torch  # noqa: E402
import yaml  # noqa: E402
from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict  # noqa: E402
from trainer.checkpoint import Checkpointer  # noqa: E402
from trainer.config import Model  # noqa: E402
from trainer.model.flops import flops_per_token, mfu, parameters  # noqa: E402
from trainer.model.transformer import LanguageModel  # noqa: E402

H200_PEAK_TFLOPS = 989.0  # the registry's peak_bf16_tflops for a3-ultragpu-8g (fleet catalog)


def model_config(name: str) -> Model:
    return Model(**yaml.safe_load((ROOT / f"platform/trainer/configs/model/{name}.yaml").read_text()))


def build(cfg: Model) -> tuple[LanguageModel, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = LanguageModel(cfg).cuda()
    return model, torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, betas=(0.9, 0.95))


def step(model: LanguageModel, optimizer: torch.optim.Optimizer, tokens: torch.Tensor) -> None:
    loss = model.loss(tokens)
    loss.backward()  # type: ignore[no-untyped-call]
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads)
    torch.nn.utils.clip_grads_with_norm_(model.parameters(), 1.0, norm)
    loss.item(), norm.item()  # the non-finite guard's reads: a sync per step, as in the trainer
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def measure_mfu(cfg: Model, batches: list[int], peak: float, warmup: int = 3, timed: int = 8) -> list[dict[str, Any]]:
    rows = []
    per_token = flops_per_token(cfg)
    for batch in batches:
        model, optimizer = build(cfg)
        tokens = torch.randint(0, cfg.vocab, (batch, cfg.seq_len + 1), device="cuda")
        row: dict[str, Any] = {"batch": batch, "seq_len": cfg.seq_len}
        try:
            for _ in range(warmup):
                step(model, optimizer, tokens)
            times = []
            for _ in range(timed):
                torch.cuda.synchronize()
                start = time.perf_counter()
                step(model, optimizer, tokens)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
            seconds = statistics.median(times)
            rate = batch * cfg.seq_len / seconds
            row |= {
                "step_s": round(seconds, 4),
                "tokens_per_s": round(rate),
                "mfu": round(mfu(rate, per_token, 1, peak) or 0.0, 4),
                "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1),
            }
        except torch.OutOfMemoryError:
            row["error"] = "out of memory"
        del model, optimizer, tokens
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        rows.append(row)
        print(json.dumps({"mfu": row}), flush=True)
    return rows


def tensor_bytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(tensor_bytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(tensor_bytes(v) for v in value)
    return 0


def measure_staging(cfg: Model, directory: Path) -> dict[str, Any]:
    model, optimizer = build(cfg)
    tokens = torch.randint(0, cfg.vocab, (1, cfg.seq_len + 1), device="cuda")
    step(model, optimizer, tokens)  # AdamW's state exists, as in a checkpoint of a running job
    del tokens
    # The trainer's form (Trainer.state_dict): parameters and optimizer state by fully qualified name.
    state = {"model": get_model_state_dict(model), "inner": get_optimizer_state_dict(model, optimizer)}
    size = tensor_bytes(state)
    shutil.rmtree(directory, ignore_errors=True)
    durable: dict[int, float] = {}
    with Checkpointer(
        str(directory),
        keep=1,
        on_event=lambda e: durable.__setitem__(e.step, e.seconds) if e.kind == "durable" else None,
    ) as checkpoints:
        first = checkpoints.save(1, state)
        checkpoints.wait()
        gb = size / 1e9
        result: dict[str, Any] = {
            "state_gb": round(gb, 2),
            "first_blocked_s": round(first, 3),
            "first_gb_per_s": round(gb / first, 1),
            "first_durable_s": round(durable.get(1, float("nan")), 1),
        }
        print(json.dumps({"staging": result}), flush=True)
        try:  # reusing the pinned buffers: the GPU machine's torch 2.11 failed here (KeyError: type)
            second = checkpoints.save(2, state)
            checkpoints.wait()
            result |= {
                "second_blocked_s": round(second, 3),
                "second_gb_per_s": round(gb / second, 1),
                "second_durable_s": round(durable.get(2, float("nan")), 1),
            }
        except Exception as error:  # reported, not hidden: the first save's figures stand
            result["second_error"] = f"{type(error).__name__}: {error}"[:200]
    shutil.rmtree(directory, ignore_errors=True)
    print(json.dumps({"staging": result}), flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--peak-tflops", type=float, default=H200_PEAK_TFLOPS)
    parser.add_argument("--batches", default="1,2,4")
    parser.add_argument("--model", default="1b")
    parser.add_argument("--dir", default="/dev/shm/meridian-bench-ckpt")
    parser.add_argument("--only", choices=("mfu", "staging"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_trainer_gpu: no CUDA device; run it on a GPU machine", file=sys.stderr)
        return 2
    cfg = model_config(args.model)
    found: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "model": args.model,
        "parameters": parameters(cfg).total,
        "flops_per_token": flops_per_token(cfg),
        "peak_tflops": args.peak_tflops,
    }
    if args.only in (None, "mfu"):
        found["mfu"] = measure_mfu(cfg, [int(b) for b in args.batches.split(",")], args.peak_tflops)
    if args.only in (None, "staging"):
        found["staging"] = measure_staging(cfg, Path(args.dir))
    print(json.dumps(found, indent=1) if args.json else found)
    return 0


if __name__ == "__main__":
    sys.exit(main())
