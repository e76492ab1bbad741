"""GPU measurements of RL post-training: vLLM generation tokens/s, weight-sync seconds, the RL step's MFU.

generate: ``VllmGenerator`` on an HF folder that ``hf.save_hf`` exported from the trainer's model family
with random weights (``--models 1b,8b``, configs/model/*.yaml) or on ``--checkpoint PATH``; random prompts
of ``--prompt-len`` tokens, ``--samples`` completions each, ``--max-tokens`` each, temperature 1, no stop
token: tokens/s = response tokens / wall seconds of one ``generate`` call after a warm-up call.

sync: the trainer's weights (bf16) from this process to the vLLM workers, ``WeightSync`` over the
standalone NCCL group whose store the trainer hosts (``vllm_worker.trainer_group``; trainer rank 0 on the
last GPU, the engine on the first): the median seconds per version of ``--versions`` versions, and GB/s.
NCCL refuses two ranks on one GPU, so with one GPU the row says ``skipped``. Without vLLM on the machine,
the workers are stood in for by a second WeightSync receiving on another GPU (``transport`` says so): a
lower bound, no engine load in it.

step: ``rl_step`` (trainer/rl/step.py) of ``--step-model`` on a batch of generated completions, fp32
weights and AdamW with the model's precision (bf16 autocast on CUDA); MFU = flops_per_token (trainer/
model/flops.py, at the batch's sequence length) x tokens/s / ``--peak-tflops``.

    python scripts/gpu_rl.py [--models 1b,8b] [--only generate,sync,step] [--checkpoint PATH]
    python scripts/gpu_rl.py --dry-run     # tiny model, CPU, TorchGenerator, gloo: the same JSON keys

Each measurement prints one JSON line: {"generate": {...}}, {"sync": {...}}, {"step": {...}}.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "platform/contract/src"), str(ROOT / "platform/trainer/src")]

import torch  # noqa: E402
import yaml  # noqa: E402
from torch._C._distributed_c10d import Backend  # noqa: E402
from trainer.config import Model  # noqa: E402
from trainer.model.flops import flops_per_token, mfu  # noqa: E402
from trainer.model.transformer import LanguageModel  # noqa: E402
from trainer.rl import hf  # noqa: E402
from trainer.rl.advantages import normalize  # noqa: E402
from trainer.rl.episode import Completion, Group, make_batch  # noqa: E402
from trainer.rl.generate import Generator, TorchGenerator, snapshot  # noqa: E402
from trainer.rl.step import StepSettings, rl_step  # noqa: E402
from trainer.rl.vllm_engine import VllmGenerator  # noqa: E402  (imports no vllm itself)
from trainer.rl.vllm_worker import trainer_group, worker_group  # noqa: E402
from trainer.rl.weight_sync import WeightSync  # noqa: E402

H200_PEAK_TFLOPS = 989.0  # the registry's peak_bf16_tflops for a3-ultragpu-8g (as bench_trainer_gpu.py)
KEYS = {
    "generate": {"model", "engine", "prompts", "samples", "tokens", "seconds", "tokens_per_s"},
    "sync": {"model", "transport", "bytes", "median_s", "gb_per_s"},
    "step": {"model", "rows", "seq_len", "step_s", "tokens_per_s", "mfu"},
}


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--models", default="1b,8b", help="configs/model names for generate and sync")
    parser.add_argument("--checkpoint", help="an HF Llama folder to generate from instead of random weights")
    parser.add_argument("--only", default="generate,sync,step", help="a comma list of generate, sync, step")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--versions", type=int, default=3)
    parser.add_argument("--step-model", default="1b")
    parser.add_argument("--tp", type=int, default=1, help="vLLM tensor_parallel_size")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.45)
    parser.add_argument("--peak-tflops", type=float, default=H200_PEAK_TFLOPS)
    parser.add_argument("--dry-run", action="store_true", help="tiny model on CPU, TorchGenerator, gloo")
    args = parser.parse_args(argv)
    args.only = args.only.split(",")
    if not set(args.only) <= set(KEYS):
        parser.error(f"--only: {args.only} is not a subset of {sorted(KEYS)}")
    args.models = args.models.split(",")
    if args.dry_run:
        args.models, args.step_model, args.prompts, args.samples = ["tiny"], "tiny", 4, 2
        args.prompt_len, args.max_tokens, args.versions = 8, 4, 2
    return args


def emit(kind: str, row: dict[str, Any]) -> dict[str, Any]:
    print(json.dumps({kind: row}), flush=True)
    return row


def model_config(name: str, dry_run: bool) -> Model:
    data = yaml.safe_load((ROOT / f"platform/trainer/configs/model/{name}.yaml").read_text())
    return Model(**(data | ({"precision": "fp32"} if dry_run else {})))


def random_state(cfg: Model, device: str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    with torch.device(device):
        model = LanguageModel(cfg)
    state = snapshot(model, dtype)
    del model
    return state


def prompts(cfg: Model, count: int, length: int) -> list[list[int]]:
    rng = torch.Generator().manual_seed(1)
    return torch.randint(0, cfg.vocab, (count, length), generator=rng).tolist()


def engine(args: argparse.Namespace, cfg: Model, folder: Path, state: dict[str, torch.Tensor]) -> Generator | None:
    """TorchGenerator in a dry run, else VllmGenerator; None (and a `skipped` row) where vllm is absent."""
    if args.dry_run:
        generator = TorchGenerator(cfg, seed=0)
        generator.load_weights(state, 0)
        return generator
    from trainer.rl.vllm_engine import EngineMissing

    try:
        return VllmGenerator(
            folder, version=0, tensor_parallel_size=args.tp, gpu_memory_utilization=args.gpu_memory_utilization
        )
    except EngineMissing as missing:
        emit("generate", {"model": folder.name, "skipped": str(missing)})
        return None


def measure_generate(args: argparse.Namespace, name: str, generator: Generator, cfg: Model) -> list[list[Completion]]:
    batch = prompts(cfg, args.prompts, args.prompt_len)
    generator.generate(batch[:2], 1, max_tokens=4, temperature=1.0)  # warm-up: graphs, allocator
    start = time.perf_counter()
    out = generator.generate(batch, args.samples, max_tokens=args.max_tokens, temperature=1.0)
    seconds = time.perf_counter() - start
    tokens = sum(len(c.response) for group in out for c in group)
    emit(
        "generate",
        {
            "model": name,
            "engine": type(generator).__name__,
            "prompts": len(batch),
            "samples": args.samples,
            "tokens": tokens,
            "seconds": round(seconds, 4),
            "tokens_per_s": round(tokens / seconds, 1),
        },
    )
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def timed_versions(
    sender: Callable[[int], None], receive: Callable[[], int], versions: int, failures: list[BaseException]
) -> list[float]:
    """Seconds per version: the receiver's wall time while a thread sends (both block in the broadcast)."""
    seconds = []
    for version in range(1, versions + 1):
        thread = threading.Thread(target=_guarded, args=(sender, version, failures))
        start = time.perf_counter()
        thread.start()
        got = receive()
        thread.join()
        seconds.append(time.perf_counter() - start)
        if failures or got != version:
            raise RuntimeError(f"sync of version {version} failed: received {got}, {failures[:1]}")
    return seconds


def _guarded(function: Callable[..., None], *args: Any) -> None:
    *call, failures = args
    try:
        function(*call)
    except BaseException as error:  # surfaced by the caller, not lost in the thread
        failures.append(error)


def measure_sync(
    args: argparse.Namespace, name: str, state: dict[str, torch.Tensor], generator: Generator | None
) -> None:
    gpus = torch.cuda.device_count()
    if not args.dry_run and gpus < args.tp + 1:
        reason = f"{gpus} GPU(s): the engine takes {args.tp} and NCCL refuses two ranks on one device"
        emit("sync", {"model": name, "skipped": reason})
        return
    backend, port = ("gloo", free_port()) if args.dry_run else ("nccl", free_port())
    device = "cpu" if args.dry_run else f"cuda:{gpus - 1}"
    trainer_state = {k: v.to(device) for k, v in state.items()}
    sync = WeightSync(trainer_state, src=0, dtype=torch.bfloat16, device=device)
    groups: list[Backend] = []
    failures: list[BaseException] = []

    def join_as_trainer(world: int) -> None:
        groups.append(trainer_group("127.0.0.1", port, world, backend=backend))

    receive, world, transport = _receiver(args, generator, state, port, backend)
    opener = threading.Thread(target=_guarded, args=(join_as_trainer, world, failures))
    opener.start()
    receive("open")
    opener.join()
    if failures:
        raise RuntimeError(f"the trainer could not join the sync group: {failures[0]}")
    seconds = timed_versions(
        lambda v: sync.send(trainer_state, v, group=groups[0]), lambda: receive("next"), args.versions, failures
    )
    if isinstance(generator, VllmGenerator):  # the workers' groups, before the process exits (close_group)
        generator.close_sync()
    size = sum(b.numel for b in sync.buckets) * sync.buffer.element_size()
    median = statistics.median(seconds)
    emit(
        "sync",
        {
            "model": name,
            "transport": transport,
            "bytes": size,
            "median_s": round(median, 4),
            "gb_per_s": round(size / median / 1e9, 2),
        },
    )


def _receiver(
    args: argparse.Namespace, generator: Generator | None, state: dict[str, torch.Tensor], port: int, backend: str
) -> tuple[Callable[[str], int], int, str]:
    """(call with "open" then "next" per version, group size, transport label) for the receiving side."""
    if isinstance(generator, VllmGenerator):  # every worker joins, receives, and loads into the engine
        vllm = generator

        def engine_step(what: str) -> int:
            return vllm.open_sync("127.0.0.1", port, backend=backend) if what == "open" else vllm.receive()

        return engine_step, 1 + args.tp, "nccl: trainer -> vLLM workers (load included)"
    device = "cpu" if args.dry_run else "cuda:0"
    sync = WeightSync(state, src=0, dtype=torch.bfloat16, device=device)
    groups: list[Backend] = []

    def step(what: str) -> int:
        if what == "open":
            groups.append(worker_group("127.0.0.1", port, 1, 2, backend=backend))
            return 0
        if not isinstance(generator, TorchGenerator):
            return sync.receive(lambda bucket: None, group=groups[0])
        # the dry run's whole path: each bucket into the generator, as the engine's load would
        version = sync.receive(lambda bucket: generator.load_part({k: v.float() for k, v in bucket.items()}), groups[0])
        generator.loaded(version)
        return version

    label = (
        "gloo: two threads, into TorchGenerator (dry run)"
        if args.dry_run
        else "nccl: WeightSync GPU to GPU, no vLLM (lower bound)"
    )
    return step, 2, label


def measure_step(args: argparse.Namespace, completions: list[list[Completion]] | None) -> None:
    cfg = model_config(args.step_model, args.dry_run)
    device = "cpu" if args.dry_run else "cuda"
    if completions is None:  # no generation this run: a batch of the same shape from random tokens
        completions = [
            [
                Completion(
                    prompt=tuple(p),
                    response=tuple(p[: args.max_tokens]),
                    logprobs=(-1.0,) * min(len(p), args.max_tokens),
                    version=0,
                )
            ]
            * args.samples
            for p in prompts(cfg, args.prompts, args.prompt_len)
        ]
    rng = torch.Generator().manual_seed(2)
    groups = []
    for i, group in enumerate(completions):
        rewards = torch.rand(len(group), generator=rng).tolist()
        groups.append(
            Group(prompt_index=i, completions=tuple(group), rewards=tuple(rewards), advantages=normalize(rewards))
        )
    batch = make_batch(groups)
    torch.manual_seed(0)
    model = LanguageModel(dataclasses.replace(cfg, seq_len=max(cfg.seq_len, batch.tokens.shape[1]))).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, betas=(0.9, 0.95), weight_decay=0.0)
    settings = StepSettings()
    times = []
    for i in range(4):  # one warm-up, three timed
        _sync(device)
        start = time.perf_counter()
        rl_step(model, optimizer, batch, settings)
        _sync(device)
        if i:
            times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    rows, seq = batch.tokens.shape
    rate = rows * seq / seconds
    per_token = flops_per_token(dataclasses.replace(cfg, seq_len=seq))
    emit(
        "step",
        {
            "model": args.step_model,
            "rows": rows,
            "seq_len": seq,
            "step_s": round(seconds, 4),
            "tokens_per_s": round(rate, 1),
            "mfu": round(mfu(rate, per_token, 1, args.peak_tflops) or 0.0, 4),
        },
    )


def _sync(device: str) -> None:
    if device != "cpu":
        torch.cuda.synchronize()


def run_model(args: argparse.Namespace, name: str, folder: Path) -> list[list[Completion]] | None:
    """Export (or use --checkpoint), start the engine, generate, sync; the engine is released after."""
    cfg = model_config(name, args.dry_run)
    if args.checkpoint:
        cfg, state = hf.load_hf(args.checkpoint)
        folder = Path(args.checkpoint)
    else:
        state = random_state(cfg, "cpu" if args.dry_run else "cuda", torch.float32 if args.dry_run else torch.bfloat16)
        hf.save_hf(state, cfg, folder)
    generator = engine(args, cfg, folder, state)
    out = measure_generate(args, name, generator, cfg) if "generate" in args.only and generator else None
    if "sync" in args.only:
        measure_sync(args, name, state, generator)
    del generator, state
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if not args.dry_run and not torch.cuda.is_available():
        print("gpu_rl: no CUDA device; run it on a GPU machine, or pass --dry-run", file=sys.stderr)
        return 2
    if args.dry_run:
        torch.set_num_threads(1)
    completions = None
    with tempfile.TemporaryDirectory(prefix="gpu-rl-") as scratch:
        if {"generate", "sync"} & set(args.only):
            for name in args.models:
                out = run_model(args, name, Path(scratch) / name)
                completions = out if name == args.step_model else completions
    if "step" in args.only:
        measure_step(args, completions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
