"""Generation: the interface every engine implements, and the trainer's own model as one engine.

``TorchGenerator`` samples with ``LanguageModel`` itself and its KV cache: the prompt runs once, then one
token per step (``sample``). Its logprobs are those of
the distribution it sampled from, temperature and token mask included (loss.masked_logits, the same
function the trainer's loss uses), so at equal weights the trainer's recompute agrees with them to fp32
rounding and the GRPO ratio is 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn

from trainer.config import Model
from trainer.model.transformer import KVCache, LanguageModel
from trainer.rl.episode import Completion
from trainer.rl.loss import masked_logits


class Generator(Protocol):
    """An inference engine holding one policy version at a time."""

    @property
    def version(self) -> int:
        """The policy version of the weights held now (-1: none loaded yet)."""
        ...

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        n: int,
        *,
        max_tokens: int,
        temperature: float,
        allowed: torch.Tensor | None = None,
        ends: Sequence[int] = (),
    ) -> list[list[Completion]]:
        """``n`` completions per prompt, each with its sampling logprobs and the version that sampled it.

        A completion ends on the first of ``ends`` it samples (kept as its last token), else at ``max_tokens``."""
        ...

    def load_weights(self, state: Mapping[str, torch.Tensor], version: int) -> None:
        """Copy ``state`` (the trainer's parameter names) into the engine; completions carry ``version`` after."""
        ...


@dataclass(frozen=True, kw_only=True)
class Sampled:
    tokens: torch.Tensor  # (B, max_tokens) long; positions after a row's end token are padding
    logprobs: torch.Tensor  # (B, max_tokens) float32
    lengths: torch.Tensor  # (B,) long: response length of each row, its end token included


@torch.no_grad()
def sample(
    model: nn.Module,
    prompts: torch.Tensor,
    *,
    max_tokens: int,
    temperature: float,
    allowed: torch.Tensor | None,
    rng: torch.Generator | None,
    ends: Sequence[int] = (),
    n: int = 1,
) -> Sampled:
    """Autoregressive sampling of ``n`` rows per prompt of ``prompts`` (P, L), all of one length: row
    ``i * n + k`` is prompt i's k-th; temperature 0 is greedy.

    A row ends at the first of ``ends`` (end-of-sequence ids) it samples; sampling stops once every row has.

    ``model`` is a ``LanguageModel`` (or one wrapped in place, as FSDP does): the prompt is prefilled into a
    ``KVCache`` once, then each step feeds only the token just drawn (the same logits as a full recompute,
    to fp32 rounding: tests/rl/test_kv_cache.py). Each prompt is prefilled once, not ``n`` times: its first
    distribution is repeated for its rows, and its cached keys and values before their second token.
    """
    b = prompts.shape[0] * n
    repeat = torch.arange(prompts.shape[0], device=prompts.device).repeat_interleave(n)
    end_ids = torch.tensor(list(ends), dtype=torch.long, device=prompts.device)
    cache = KVCache(prompts.shape[1] + max_tokens)
    fed = prompts  # what the model has not seen yet: the prompt, then the last token drawn
    out = torch.zeros(b, max_tokens, dtype=torch.long, device=prompts.device)
    logprobs = torch.zeros(b, max_tokens, dtype=torch.float32, device=prompts.device)
    lengths = torch.full((b,), max_tokens, dtype=torch.long, device=prompts.device)
    done = torch.zeros(b, dtype=torch.bool, device=prompts.device)
    for t in range(max_tokens):
        last = torch.zeros(fed.shape, dtype=torch.bool, device=fed.device)
        last[:, -1] = True  # the head at each row's last position only: the prompt's others are never read
        logits = model(fed, cache=cache, at=last)
        scaled = masked_logits(logits, allowed, temperature)
        if t == 0 and n > 1:
            scaled = scaled.index_select(0, repeat)
        if temperature > 0:
            token = torch.multinomial(torch.softmax(scaled, dim=-1), 1, generator=rng).squeeze(-1)
        else:
            token = scaled.argmax(dim=-1)
        logp = torch.log_softmax(scaled, dim=-1).gather(-1, token[:, None]).squeeze(-1)
        out[:, t] = torch.where(done, torch.zeros_like(token), token)
        logprobs[:, t] = torch.where(done, torch.zeros_like(logp), logp)
        if ends:
            ended = torch.isin(token, end_ids) & ~done
            lengths = torch.where(ended, torch.full_like(lengths, t + 1), lengths)
            done |= ended
            if bool(done.all()):
                break
        if t == 0 and n > 1 and max_tokens > 1:
            cache = cache.rows(repeat)
        fed = out[:, t : t + 1]
    return Sampled(tokens=out, logprobs=logprobs, lengths=lengths)


class TorchGenerator:
    """The trainer's ``LanguageModel`` as a generator, on CPU or CUDA, seeded for reproducible samples."""

    def __init__(self, cfg: Model, *, seed: int, device: str | torch.device = "cpu") -> None:
        with torch.device("meta"):  # no initialization: the weights come from load_weights
            model = LanguageModel(cfg)
        self.model = model.to_empty(device=device).eval()
        self.device = torch.device(device)
        self.rng = torch.Generator(device=self.device).manual_seed(seed)
        self._version = -1

    @property
    def version(self) -> int:
        return self._version

    def load_weights(self, state: Mapping[str, torch.Tensor], version: int) -> None:
        own = self.model.state_dict()
        if set(state) != set(own):
            missing, unknown = sorted(set(own) - set(state)), sorted(set(state) - set(own))
            raise ValueError(f"weights for version {version}: missing {missing[:3]}, unknown {unknown[:3]}")
        self.load_part(state, f"weights for version {version}")
        self._version = version

    @torch.no_grad()
    def load_part(self, state: Mapping[str, torch.Tensor], what: str = "a bucket of weights") -> None:
        """Copy some of the weights (a sync's bucket) into the engine's own memory, never an alias of the sender's.

        Refused whole (nothing copied) when a name or shape is not the model's. Once copying, the engine holds no
        version until ``loaded``: a sync that fails half-way leaves weights of two versions, stamped as neither."""
        own = self.model.state_dict()
        for name, tensor in state.items():
            if name not in own:
                raise ValueError(f"{what}: {name!r} is not a parameter of the model")
            if tensor.shape != own[name].shape:
                raise ValueError(f"{what}: {name} is {tuple(tensor.shape)}, the model's is {tuple(own[name].shape)}")
        self._version = -1
        for name, tensor in state.items():
            own[name].copy_(tensor)

    def loaded(self, version: int) -> None:
        """Every bucket of ``version`` is in (load_part): completions carry it from now on."""
        self._version = version

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        n: int,
        *,
        max_tokens: int,
        temperature: float,
        allowed: torch.Tensor | None = None,
        ends: Sequence[int] = (),
    ) -> list[list[Completion]]:
        if self._version < 0:
            raise RuntimeError("no weights loaded: call load_weights first")
        if n < 1 or max_tokens < 1:
            raise ValueError("n and max_tokens must be at least 1")
        version = self._version  # one version for the whole call: weights change only between calls
        results: list[list[Completion]] = [[] for _ in prompts]
        by_length: dict[int, list[int]] = {}
        for i, prompt in enumerate(prompts):
            by_length.setdefault(len(prompt), []).append(i)
        for length in sorted(by_length):  # one batch per prompt length: no padding inside a sampled row
            rows = [i for i in by_length[length] for _ in range(n)]  # sample's row order: n per prompt
            batch = torch.tensor([list(prompts[i]) for i in by_length[length]], dtype=torch.long, device=self.device)
            drawn = sample(
                self.model,
                batch,
                max_tokens=max_tokens,
                temperature=temperature,
                allowed=allowed,
                rng=self.rng,
                ends=ends,
                n=n,
            )
            tokens, logprobs, lengths = drawn.tokens.tolist(), drawn.logprobs.tolist(), drawn.lengths.tolist()
            for row, i in enumerate(rows):
                k = lengths[row]
                results[i].append(
                    Completion(
                        prompt=tuple(prompts[i]),
                        response=tuple(tokens[row][:k]),
                        logprobs=tuple(logprobs[row][:k]),
                        version=version,
                    )
                )
        return results


def snapshot(model: nn.Module, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """A copy of the model's weights, detached from the optimizer: what a weight sync sends.

    Taken after the step, so nothing the optimizer writes later can change what a generator receives
    (the hazard torchtitan removed by staging snapshots). ``dtype``: cast while copying (bf16 for vLLM).
    """
    return {
        name: tensor.detach().to(dtype=dtype or tensor.dtype, copy=True) for name, tensor in model.state_dict().items()
    }
