"""The model family: a decoder-only transformer in the Llama 3 style, from `tiny` (CPU tests) to `70b`.

Pre-norm blocks with RMSNorm, rotary position embeddings (rotate-half form), grouped-query
attention through ``scaled_dot_product_attention`` (``enable_gqa``: no copies of K/V) and a
SwiGLU MLP; no biases. Embeddings are untied: Llama 3 8B/70B untie them, and a tied weight
would belong to two streaming-DiLoCo fragments (the first and the last) and two FSDP units.
bf16 autocast on CUDA by default (``model.precision``); activation checkpointing per block
(``model.activation_checkpointing``). The sizes live in configs/model/*.yaml; model/flops.py counts
their parameters and FLOPs from the same settings.

Generation passes a ``KVCache``: the prompt is run once (prefill), then one token per call, each
attending over the keys and values cached so far at its own rotary position. Without a cache (training,
the loss, evaluation of whole sequences) the forward is the one above, unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable
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


class KVCache:
    """The keys and values of every token a generating model has seen, per layer, allocated once.

    ``capacity``: the most tokens it holds (prompt + new tokens). ``length`` tokens are cached; the next
    forward's tokens sit at positions ``length ..``, and ``LanguageModel.forward`` moves it on after all
    layers stored theirs. The buffers are allocated at the first layer's first write, with the shapes,
    dtype and device of its keys (bf16 under CUDA autocast). ``angles``: the rotary cos and sin of all its
    positions, computed once (a step slices its own: one step in 16 was spent recomputing them, measured).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.length = 0
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.angles: tuple[torch.Tensor, torch.Tensor] | None = None

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Store layer ``layer``'s new keys and values, then attend ``q`` over all cached ones, causally."""
        b, heads, t, dim = k.shape
        start, end = self.length, self.length + t
        if layer == len(self.keys):
            self.keys.append(k.new_empty(b, heads, self.capacity, dim))
            self.values.append(v.new_empty(b, heads, self.capacity, dim))
        self.keys[layer][:, :, start:end] = k
        self.values[layer][:, :, start:end] = v
        keys, values = self.keys[layer][:, :, :end], self.values[layer][:, :, :end]
        if t == 1:  # one new token sees every cached one: no mask
            return F.scaled_dot_product_attention(q, keys, values, enable_gqa=True)
        if start == 0:  # the prefill: the training path's own causal attention
            return F.scaled_dot_product_attention(q, keys, values, is_causal=True, enable_gqa=True)
        mask = torch.ones(t, end, dtype=torch.bool, device=q.device).tril(diagonal=start)
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)

    def rotary(
        self, tokens: int, table: Callable[[int], tuple[torch.Tensor, torch.Tensor]]
    ) -> tuple[torch.Tensor, ...]:
        """cos and sin of the next ``tokens`` positions, sliced from ``table(capacity)`` (computed at the first call)."""
        if self.length + tokens > self.capacity:
            raise ValueError(f"KV cache: {self.length + tokens} tokens do not fit its capacity of {self.capacity}")
        if self.angles is None:
            self.angles = table(self.capacity)
        return tuple(a[self.length : self.length + tokens] for a in self.angles)

    def advance(self, tokens: int) -> None:
        self.length += tokens

    def rows(self, index: torch.Tensor) -> KVCache:
        """A cache whose row i continues from this cache's row ``index[i]`` (rows may repeat): the G completions
        of one prompt continue from its one prefill (model/prefix.py). The keys and values are indexed, not
        aliased, so autograd sums each repeated row's gradients back into the prompt's."""
        out = KVCache(self.capacity)
        out.length, out.angles = self.length, self.angles
        for mine, theirs in ((self.keys, out.keys), (self.values, out.values)):
            for cached in mine:
                _, heads, _, dim = cached.shape
                rows = cached.new_empty(len(index), heads, self.capacity, dim)
                rows[:, :, : self.length] = cached[:, :, : self.length].index_select(0, index)
                theirs.append(rows)
        return out


class Attention(nn.Module):
    def __init__(self, cfg: Model) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.heads, kv_heads(cfg), cfg.d_model // cfg.heads
        self.dropout = cfg.dropout
        self.wq = nn.Linear(cfg.d_model, self.heads * self.head_dim, bias=False)
        self.wk = nn.Linear(cfg.d_model, self.kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(cfg.d_model, self.kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(self.heads * self.head_dim, cfg.d_model, bias=False)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: tuple[KVCache, int] | None = None
    ) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        if cache is not None:
            out = cache[0].attend(cache[1], q, k, v)
        else:
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

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: tuple[KVCache, int] | None = None
    ) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin, cache)
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

    def forward(
        self, tokens: torch.Tensor, cache: KVCache | None = None, at: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Logits (B, T, V) of ``tokens`` (B, T). With ``cache``: ``tokens`` follow the cached ones (their
        positions start at ``cache.length``), their keys and values join the cache, and they attend to it.
        With ``at`` ((B, T) bool): logits only where it is true, (N, V) in row-major order; the output head is
        the model's widest layer (a 128k vocabulary), and RL's loss reads the response positions only."""
        length, head_dim = tokens.shape[1], self.cfg.d_model // self.cfg.heads
        if cache is None:
            cos, sin = rope(length, head_dim, self.cfg.rope_theta, tokens.device)
        else:  # the new tokens' positions go on from the cache's length
            cos, sin = cache.rotary(length, lambda n: rope(n, head_dim, self.cfg.rope_theta, tokens.device))
        with self._autocast(tokens.device):
            x = self.embed(tokens)
            for layer, block in enumerate(self.blocks):
                if cache is not None:
                    x = block(x, cos, sin, (cache, layer))
                elif self.cfg.activation_checkpointing and self.training and torch.is_grad_enabled():
                    x = checkpoint(block, x, cos, sin, use_reentrant=False)
                else:
                    x = block(x, cos, sin)
            logits: torch.Tensor = self.head(self.norm(x if at is None else x[at]))
        if cache is not None:
            cache.advance(length)
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
