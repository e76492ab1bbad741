"""Parameters, model FLOPs per token and MFU, from the model's settings alone (pure: no torch).

FLOPs per token of training, PaLM's appendix B (Chowdhery et al. 2022, "Model FLOPs utilization"),
the formula torchtitan's ``get_num_flop_per_token`` uses too:

    6 N + 12 L H Q T

N: the parameters of the matrices a token is multiplied by: every projection of every block
(attention q, k, v, o; the SwiGLU's w1, w3, w2) and the output head. Each costs 2 FLOPs per
parameter forward and 4 backward. Left out: the input embedding (a lookup, no multiplication)
and the RMSNorm weights (elementwise, under 0.01% of N). The second term is attention's own two
matmuls (Q K^T and A V: 2 x 2 L H Q T forward, twice that backward), L layers, H query heads,
Q head dimension, T the sequence length; causal masking is not discounted (PaLM's convention).
Model FLOPs count no recomputation: activation checkpointing lowers MFU, it does not raise it.

MFU = achieved model FLOPs per second / (GPUs x peak dense bf16 FLOPS per GPU).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trainer.config import Model


def ffn_width(m: Model) -> int:
    """The SwiGLU's hidden width: model.ffn_dim, or Llama's rule (8/3 of d_model), rounded up to 64."""
    return m.ffn_dim or 64 * -(-8 * m.d_model // (3 * 64))


@dataclass(frozen=True)
class Parameters:
    embedding: int  # the input embedding table: a lookup
    matmul: int  # N: the block projections and the output head
    norm: int  # RMSNorm weights

    @property
    def total(self) -> int:
        return self.embedding + self.matmul + self.norm


def parameters(m: Model) -> Parameters:
    head_dim = m.d_model // m.heads
    kv = m.kv_heads or m.heads
    attention = m.d_model * m.heads * head_dim * 2 + m.d_model * kv * head_dim * 2  # q and o, k and v
    mlp = 3 * m.d_model * ffn_width(m)
    return Parameters(
        embedding=m.vocab * m.d_model,
        matmul=m.layers * (attention + mlp) + m.d_model * m.vocab,
        norm=(2 * m.layers + 1) * m.d_model,
    )


def flops_per_token(m: Model) -> int:
    """Training FLOPs (forward and backward) per token: 6 N + 12 L H Q T."""
    return 6 * parameters(m).matmul + 12 * m.layers * m.heads * (m.d_model // m.heads) * m.seq_len


def mfu(tokens_per_s: float, flops_per_token: float, gpus: int, peak_tflops: float) -> float | None:
    """The share of the GPUs' peak spent on model FLOPs; None when the peak is unknown (0)."""
    if peak_tflops <= 0 or gpus <= 0:
        return None
    return tokens_per_s * flops_per_token / (gpus * peak_tflops * 1e12)


def format_mfu(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


@dataclass
class Window:
    """Throughput of one replica group per logging window: tokens/s and MFU between two logged steps.

    ``tokens_per_step``: tokens one committed step trains on (inner steps x batch x sequence length);
    ``gpus``: the group's GPUs. The window's time is wall time, checkpoints and failed steps included.
    """

    tokens_per_step: int
    flops_per_token: int
    gpus: int
    peak_tflops: float
    clock: Callable[[], float]
    step: int = 0
    since: float = 0.0

    def start(self, step: int) -> None:
        self.step, self.since = step, self.clock()

    def close(self, step: int) -> dict[str, float | None]:
        """tokens/s and MFU since the last call (or ``start``); opens the next window."""
        now = self.clock()
        seconds = now - self.since
        tokens = (step - self.step) * self.tokens_per_step
        rate = tokens / seconds if seconds > 0 else 0.0
        self.step, self.since = step, now
        value = mfu(rate, self.flops_per_token, self.gpus, self.peak_tflops)
        return {"tokens_per_s": round(rate, 1), "mfu": None if value is None else round(value, 5)}
