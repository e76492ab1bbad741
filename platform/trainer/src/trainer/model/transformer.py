"""The model family: a decoder-only transformer in the Llama 3 style, from `tiny` (CPU tests) to `70b`.

Pre-norm blocks with RMSNorm, rotary position embeddings (rotate-half form), grouped-query
attention through ``scaled_dot_product_attention`` (``enable_gqa``: no copies of K/V) and a
SwiGLU MLP; no biases. Embeddings are untied: Llama 3 8B/70B untie them, and a tied weight
would belong to two streaming-DiLoCo fragments (the first and the last) and two FSDP units.
bf16 autocast on CUDA by default (``model.precision``); activation checkpointing per block
(``model.activation_checkpointing``). The sizes live in configs/model/*.yaml; model/flops.py counts
their parameters and FLOPs from the same settings.
"""

from __future__ import annotations

import math
from contextlib import nullcontext

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from trainer.config import Model
from trainer.model.flops import ffn_width


def kv_heads(cfg: Model) -> int:
    return cfg.kv_heads or cfg.heads


def rope(length: int, head_dim: int, theta: float, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotary angles, (length, head_dim): computed per forward (cheap), so no buffer
    needs re-initializing after meta-device construction or sharding."""
    freqs = theta ** (-torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(length, device=device, dtype=torch.float32), freqs)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x * cos + rotated * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: Model) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.heads, kv_heads(cfg), cfg.d_model // cfg.heads
        self.dropout = cfg.dropout
        self.wq = nn.Linear(cfg.d_model, self.heads * self.head_dim, bias=False)
        self.wk = nn.Linear(cfg.d_model, self.kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(cfg.d_model, self.kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(self.heads * self.head_dim, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        out = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0, enable_gqa=True
        )
        result: torch.Tensor = self.wo(out.transpose(1, 2).reshape(b, t, -1))
        return result


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, cfg: Model) -> None:
        super().__init__()
        hidden = ffn_width(cfg)
        self.w1 = nn.Linear(cfg.d_model, hidden, bias=False)
        self.w3 = nn.Linear(cfg.d_model, hidden, bias=False)
        self.w2 = nn.Linear(hidden, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.w2(F.silu(self.w1(x)) * self.w3(x))
        return result


class Block(nn.Module):
    def __init__(self, cfg: Model) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        out: torch.Tensor = x + self.feed_forward(self.ffn_norm(x))
        return out


class LanguageModel(nn.Module):
    def __init__(self, cfg: Model) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """Normal(0, 0.02); the projections back into the residual stream scaled by 1/sqrt(2 * layers)
        (GPT-2's depth scaling), so the residual's variance does not grow with depth. Norms at 1."""
        deep = 0.02 / math.sqrt(2 * self.cfg.layers)
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.ones_(p)
            else:
                nn.init.normal_(p, std=deep if name.endswith(("wo.weight", "w2.weight")) else 0.02)

    def _autocast(self, device: torch.device) -> torch.autocast | nullcontext[None]:
        precision = self.cfg.precision
        if precision == "bf16" or (precision == "auto" and device.type == "cuda"):
            return torch.autocast(device.type, dtype=torch.bfloat16)
        return nullcontext()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        cos, sin = rope(length, self.cfg.d_model // self.cfg.heads, self.cfg.rope_theta, tokens.device)
        with self._autocast(tokens.device):
            x = self.embed(tokens)
            for block in self.blocks:
                if self.cfg.activation_checkpointing and self.training and torch.is_grad_enabled():
                    x = checkpoint(block, x, cos, sin, use_reentrant=False)
                else:
                    x = block(x, cos, sin)
            logits: torch.Tensor = self.head(self.norm(x))
        return logits

    def loss(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = self(tokens[:, :-1]).float()  # the softmax in fp32, whatever the matmuls ran in
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))

    def fragments(self, count: int) -> list[nn.Module]:
        """The model split into `count` parts of consecutive layers, for streaming DiLoCo.

        The first part carries the embeddings, the last the output head, so
        every parameter belongs to exactly one fragment.
        """
        blocks = list(self.blocks)
        size = -(-len(blocks) // count)
        groups = [blocks[i : i + size] for i in range(0, len(blocks), size)]
        parts: list[nn.Module] = []
        for i, group in enumerate(groups):
            members: list[nn.Module] = list(group)
            if i == 0:
                members = [self.embed, *members]
            if i == len(groups) - 1:
                members = [*members, self.norm, self.head]
            parts.append(nn.ModuleList(members))
        return parts
