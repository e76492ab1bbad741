"""Benchmark: the RL torch engine (``TorchGenerator``, the trainer's ``LanguageModel`` with its KV cache) against
transformers' ``generate`` on the same weights and the same batch, on CPU, one thread each.

The model is the trainer's (``--model``, seeded init), exported with ``hf.save_hf`` (fp32) and loaded by
``LlamaForCausalLM.from_pretrained``. The batch is one generator lease of the distributed run's defaults:
``--prompts`` arithmetic prompts of one length x ``--n`` completions each (configs/grpo.yaml: 16 x 16).
For each new-token count (``--tokens``) and mode (greedy; sampled at temperature 1 over the whole
vocabulary: transformers' top-k 50 turned off) both engines run ``--runs`` times, alternating, after one
warm-up each; tokens/s is rows x new tokens / seconds, the median of the runs, and the ratio is ours /
transformers'. Every completion runs to its length (no stop token; transformers with ``min_new_tokens``).
Ours also returns each token's logprob (what the trainer's loss needs); transformers' is asked only for
tokens. As a check that both run the same model, the greedy rows both engines wrote alike are counted.

    .venv/bin/python scripts/bench_rl_generate.py [--model tiny] [--tokens 32,256] [--runs 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "platform/trainer/configs/model"
MODES = {"greedy": 0.0, "sampled": 1.0}


def _prompts(count: int) -> list[list[int]]:
    """``count`` arithmetic prompts of one byte length (one sampling batch, as TorchGenerator batches by length)."""
    from trainer.rl.prompts import arithmetic_problems

    encoded = [list(p.prompt.encode()) for p in arithmetic_problems()]
    length = min(len(e) for e in encoded)
    same = [e for e in encoded if len(e) == length]
    if len(same) < count:
        sys.exit(f"bench_rl_generate: --prompts {count}: only {len(same)} arithmetic prompts of length {length}")
    return same[:count]


def _ours(engine: Any, prompts: list[list[int]], n: int, tokens: int, temperature: float) -> tuple[float, list[Any]]:
    began = time.perf_counter()
    groups = engine.generate(prompts, n, max_tokens=tokens, temperature=temperature)
    seconds = time.perf_counter() - began
    return seconds, [list(c.response) for g in groups for c in g]


def _theirs(model: Any, rows: torch.Tensor, tokens: int, temperature: float) -> tuple[float, list[Any]]:
    sampled = temperature > 0
    settings: dict[str, Any] = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if sampled else {"do_sample": False}  # fmt: skip
    began = time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            rows, attention_mask=torch.ones_like(rows), max_new_tokens=tokens, min_new_tokens=tokens,
            eos_token_id=None, pad_token_id=0, **settings,
        )  # fmt: skip
    seconds = time.perf_counter() - began
    return seconds, out[:, rows.shape[1] :].tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="a configs/model/*.yaml name")
    parser.add_argument("--tokens", default="32,256", help="new tokens per completion, comma-separated")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=16, help="completions per prompt")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        from transformers import LlamaForCausalLM
    except ImportError:
        sys.exit("bench_rl_generate: transformers is not installed; it is in requirements/dev.lock (make setup)")
    from trainer.config import Model
    from trainer.model.transformer import LanguageModel
    from trainer.rl.generate import TorchGenerator, snapshot
    from trainer.rl.hf import save_hf

    torch.set_num_threads(1)
    lengths = [int(t) for t in args.tokens.split(",")]
    prompts = _prompts(args.prompts)
    cfg = Model(**(yaml.safe_load((MODELS / f"{args.model}.yaml").read_text()) | {"precision": "fp32"}))
    cfg = replace(cfg, seq_len=max(cfg.seq_len, len(prompts[0]) + max(lengths)))  # transformers' position limit
    torch.manual_seed(0)
    weights = snapshot(LanguageModel(cfg))
    ours = TorchGenerator(cfg, seed=0)
    ours.load_weights(weights, version=0)
    with tempfile.TemporaryDirectory() as folder:
        save_hf(weights, cfg, folder, dtype=torch.float32)
        theirs: Any = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32)
    theirs.eval()
    rows = torch.tensor([p for p in prompts for _ in range(args.n)])
    results = []
    for tokens in lengths:
        for mode, temperature in MODES.items():
            _ours(ours, prompts, args.n, tokens, temperature)  # warm-up
            _theirs(theirs, rows, tokens, temperature)
            mine, other = [], []
            for _ in range(args.runs):
                seconds, our_rows = _ours(ours, prompts, args.n, tokens, temperature)
                mine.append(len(rows) * tokens / seconds)
                seconds, their_rows = _theirs(theirs, rows, tokens, temperature)
                other.append(len(rows) * tokens / seconds)
            same = sum(a == b for a, b in zip(our_rows, their_rows, strict=True)) if mode == "greedy" else None
            ours_tps, theirs_tps = statistics.median(mine), statistics.median(other)
            results.append({
                "tokens": tokens, "mode": mode, "ours_tok_s": round(ours_tps), "transformers_tok_s": round(theirs_tps),
                "ratio": round(ours_tps / theirs_tps, 2), "greedy_rows_alike": same,
            })  # fmt: skip
    if args.json:
        print(json.dumps({"model": args.model, "rows": len(rows), "runs": args.runs, "results": results}, indent=2))
        return
    print(f"model {args.model}, {len(rows)} rows ({args.prompts} prompts x {args.n}), prompt length "
          f"{len(prompts[0])}, 1 thread, median of {args.runs} runs")  # fmt: skip
    print(f"{'new tokens':>10}  {'mode':<8} {'torch engine tok/s':>18} {'transformers tok/s':>18} {'ratio':>6}  greedy rows alike")  # fmt: skip
    for r in results:
        alike = "" if r["greedy_rows_alike"] is None else f"{r['greedy_rows_alike']}/{len(rows)}"
        print(f"{r['tokens']:>10}  {r['mode']:<8} {r['ours_tok_s']:>18,} {r['transformers_tok_s']:>18,} {r['ratio']:>6.2f}  {alike}")  # fmt: skip


if __name__ == "__main__":
    main()
