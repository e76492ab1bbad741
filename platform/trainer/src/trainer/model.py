"""The reference task's model: a small decoder-only transformer language model."""

from __future__ import annotations

import torch
from torch import nn

from trainer.config import Model


class Block(nn.Module):
    def __init__(self, cfg: Model) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.attn = nn.MultiheadAttention(cfg.d_model, cfg.heads, dropout=cfg.dropout, batch_first=True)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(), nn.Linear(4 * cfg.d_model, cfg.d_model)
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        out: torch.Tensor = x + self.mlp(self.norm2(x))
        return out


class LanguageModel(nn.Module):
    def __init__(self, cfg: Model) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.position = nn.Parameter(torch.zeros(cfg.seq_len, cfg.d_model))
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        nn.init.normal_(self.position, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        mask = torch.triu(torch.full((length, length), float("-inf"), device=tokens.device), diagonal=1)
        x = self.embed(tokens) + self.position[:length]
        for block in self.blocks:
            x = block(x, mask)
        logits: torch.Tensor = self.head(self.norm(x))
        return logits

    def loss(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = self(tokens[:, :-1])
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))

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
                members = [self.embed, _Holder(self.position), *members]
            if i == len(groups) - 1:
                members = [*members, self.norm, self.head]
            parts.append(nn.ModuleList(members))
        return parts


class _Holder(nn.Module):
    """Puts a bare parameter into a module, so a fragment can hold it."""

    def __init__(self, parameter: nn.Parameter) -> None:
        super().__init__()
        self.parameter = parameter
