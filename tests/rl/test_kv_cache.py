"""The KV cache (model/transformer.py) against the full recompute it replaces: the same logits to fp32
rounding at every position, so the same sampled tokens and logprobs for a fixed seed, in ``sample`` and
in TorchGenerator's per-length batches; rotary positions continue where the cache ends."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from trainer.config import Model
from trainer.model.transformer import KVCache, LanguageModel
from trainer.rl import generate
from trainer.rl.generate import Sampled, TorchGenerator, sample, snapshot
from trainer.rl.loss import masked_logits
from trainer.rl.tokens import DIGITS, allowed_mask

PROMPTS = [list(b"3+4="), list(b"12+5="), list(b"0+0="), list(b"7+12=")]  # lengths 4 and 5: two batches
FP32 = 1e-5  # what fp32 rounding allows between the two paths' logits and logprobs


def _model(cfg: Model, seed: int = 0) -> LanguageModel:
    torch.manual_seed(seed)
    return LanguageModel(cfg).eval()


@torch.no_grad()
def _recompute(model: torch.nn.Module, prompts: torch.Tensor, **options: Any) -> Sampled:
    """The sampler as it was before the cache (``sample``'s arguments): the whole sequence through the model
    for every token. No stop token: every row runs to ``max_tokens``."""
    assert options.get("stop") is None
    max_tokens, temperature, allowed, rng = (options[k] for k in ("max_tokens", "temperature", "allowed", "rng"))
    prompts = prompts.repeat_interleave(options.get("n", 1), dim=0)  # each prompt's rows, each run whole
    sequence = prompts
    tokens, logprobs = [], []
    for _ in range(max_tokens):
        scaled = masked_logits(model(sequence)[:, -1], allowed, temperature)
        if temperature > 0:
            token = torch.multinomial(torch.softmax(scaled, dim=-1), 1, generator=rng).squeeze(-1)
        else:
            token = scaled.argmax(dim=-1)
        tokens.append(token)
        logprobs.append(torch.log_softmax(scaled, dim=-1).gather(-1, token[:, None]).squeeze(-1))
        sequence = torch.cat([sequence, token[:, None]], dim=1)
    b = prompts.shape[0]
    return Sampled(
        tokens=torch.stack(tokens, 1), logprobs=torch.stack(logprobs, 1), lengths=torch.full((b,), max_tokens)
    )


@torch.no_grad()
def test_prefill_then_one_token_per_call_gives_the_full_forwards_logits(tiny: Model) -> None:
    model = _model(tiny)
    sequence = torch.randint(0, tiny.vocab, (3, 20), generator=torch.Generator().manual_seed(0))
    full = model(sequence)
    cache = KVCache(20)
    pieces = [model(sequence[:, :7], cache=cache)]  # the prefill
    pieces += [model(sequence[:, t : t + 1], cache=cache) for t in range(7, 12)]  # one token per call
    pieces.append(model(sequence[:, 12:20], cache=cache))  # a chunk after the prefill: the causal mask's offset
    assert cache.length == 20
    cached = torch.cat(pieces, dim=1)
    assert float((cached - full).abs().max()) < FP32


@torch.no_grad()
def test_cached_tokens_are_rotated_at_their_place_in_the_sequence(tiny: Model) -> None:
    """A token fed after a prefill is rotated at its position; were its angles those of position 0 (the
    rotary table restarting with each call), its logits would be off by far more than rounding."""
    model = _model(tiny)
    sequence = torch.tensor([list(b"12+5=17")])
    want = model(sequence)[:, -1]

    def last(restart: bool) -> torch.Tensor:
        cache = KVCache(7)
        model(sequence[:, :6], cache=cache)
        if restart and cache.angles is not None:  # row 6 of the table becomes position 0's angles
            cache.angles = (cache.angles[0].roll(6, dims=0), cache.angles[1].roll(6, dims=0))
        logits: torch.Tensor = model(sequence[:, 6:], cache=cache)
        return logits[:, -1]

    assert float((last(restart=False) - want).abs().max()) < FP32
    assert float((last(restart=True) - want).abs().max()) > 1e-3


def test_a_cache_refuses_tokens_beyond_its_capacity(tiny: Model) -> None:
    model = _model(tiny)
    cache = KVCache(4)
    with torch.no_grad():
        model(torch.tensor([list(b"1+2=")]), cache=cache)
        with pytest.raises(ValueError, match="5 tokens do not fit its capacity of 4"):
            model(torch.tensor([[ord("3")]]), cache=cache)


@pytest.mark.parametrize(("temperature", "allowed"), [(1.0, None), (0.7, "digits"), (0.0, None), (0.0, "digits")])
def test_sample_draws_what_the_full_recompute_draws_from_the_same_seed(
    tiny: Model, temperature: float, allowed: str | None
) -> None:
    model = _model(tiny)
    mask = allowed_mask(tiny.vocab, DIGITS) if allowed else None
    prompts = torch.tensor([PROMPTS[0]] * 4)
    kw = {"max_tokens": 8, "temperature": temperature, "allowed": mask}
    cached = sample(model, prompts, rng=torch.Generator().manual_seed(3), **kw)  # type: ignore[arg-type]
    full = _recompute(model, prompts, rng=torch.Generator().manual_seed(3), **kw)
    assert torch.equal(cached.tokens, full.tokens)
    assert float((cached.logprobs - full.logprobs).abs().max()) < FP32
    assert len(set(map(tuple, cached.tokens.tolist()))) > (temperature > 0)  # the rows are not all one sample


@pytest.mark.parametrize("max_tokens", [1, 6])
def test_n_rows_of_one_prefill_draw_what_n_prefills_of_the_prompt_draw(tiny: Model, max_tokens: int) -> None:
    """A GRPO group's rows share their prompt's one prefill: its first distribution for their first tokens,
    its cached keys and values for the rest. The same seed draws the same tokens as the prompt run per row."""
    model = _model(tiny)
    prompts = torch.tensor([PROMPTS[0], PROMPTS[2]])
    kw: dict[str, Any] = {"max_tokens": max_tokens, "temperature": 1.0, "allowed": None}
    shared = sample(model, prompts, rng=torch.Generator().manual_seed(3), n=8, **kw)
    each = sample(model, prompts.repeat_interleave(8, dim=0), rng=torch.Generator().manual_seed(3), **kw)
    assert shared.tokens.shape == (16, max_tokens)
    assert torch.equal(shared.tokens, each.tokens)
    assert float((shared.logprobs - each.logprobs).abs().max()) < FP32
    assert len(set(map(tuple, shared.tokens[:8].tolist()))) > 1  # one prompt's rows are not one sample


def test_torch_generator_per_length_batches_match_the_full_recompute(
    tiny: Model, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _model(tiny)

    def run() -> list[list[tuple[tuple[int, ...], tuple[float, ...]]]]:
        engine = TorchGenerator(tiny, seed=5)
        engine.load_weights(snapshot(model), version=0)
        groups = engine.generate(PROMPTS, 2, max_tokens=6, temperature=1.0)
        return [[(c.response, c.logprobs) for c in group] for group in groups]

    cached = run()
    monkeypatch.setattr(generate, "sample", _recompute)
    full = run()
    for got, want in zip(cached, full, strict=True):
        assert [r for r, _ in got] == [r for r, _ in want]
        for (_, a), (_, b) in zip(got, want, strict=True):
            assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < FP32
