"""Training data for the reference task, with a position that checkpoints and resumes exactly.

Batches are a pure function of (seed, replica group, index), and the index
comes from the committed step: a resumed or healed replica group continues
with exactly the batches it would have seen, a step that failed to commit
is retried on the same batch, and no two groups see the same batch.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import torch

from trainer.config import Data


class Batches:
    def __init__(self, cfg: Data, seq_len: int, vocab: int, group: int) -> None:
        self.cfg, self.seq_len, self.vocab, self.group = cfg, seq_len, vocab, group
        if cfg.kind == "markov":
            chain = torch.Generator().manual_seed(cfg.seed)
            # Each token may be followed by `branching` tokens, uniformly: entropy floor ln(branching).
            self.next = torch.randint(0, vocab, (vocab, cfg.branching), generator=chain)
        else:
            self.text = _load_text(cfg.path)

    def _generator(self, index: int) -> torch.Generator:
        mixed = self.cfg.seed * 6364136223846793005 + self.group * 1442695040888963407 + index
        return torch.Generator().manual_seed(mixed % 2**63)

    def batch(self, index: int) -> torch.Tensor:
        g, b, n = self._generator(index), self.cfg.batch_size, self.seq_len + 1
        if self.cfg.kind == "markov":
            tokens = torch.empty(b, n, dtype=torch.long)
            tokens[:, 0] = torch.randint(0, self.vocab, (b,), generator=g)
            choices = torch.randint(0, self.cfg.branching, (b, n), generator=g)
            for t in range(1, n):
                tokens[:, t] = self.next[tokens[:, t - 1], choices[:, t]]
            return tokens
        starts = torch.randint(0, len(self.text) - n, (b,), generator=g)
        return torch.stack([self.text[s : s + n] for s in starts.tolist()])


def _load_text(path: str) -> torch.Tensor:
    raw = Path(path).read_bytes() if path else resources.files("trainer").joinpath("data/corpus.txt").read_bytes()
    return torch.tensor(list(raw), dtype=torch.long)
