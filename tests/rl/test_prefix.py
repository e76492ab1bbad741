"""The shared-prompt forward (model/prefix.py) against the plain one it replaces in the trainer's loss:
the same per-token logprobs and the same gradients to fp32 rounding, on batches whose rows share prompts,
differ in prompt length and end at different lengths; each distinct prompt runs once."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from trainer.config import Model
from trainer.model.prefix import layout
from trainer.model.transformer import LanguageModel
from trainer.rl.episode import Completion, Group, make_batch
from trainer.rl.loss import response_logprobs
from trainer.rl.tokens import DIGITS, allowed_mask


def _groups() -> list[Group]:
    """Two prompts of 4 tokens, one of 5; answers of 1 to 3 tokens; one prompt in two groups."""

    def group(index: int, prompt: bytes, responses: list[bytes]) -> Group:
        completions = tuple(
            Completion(prompt=tuple(prompt), response=tuple(r), logprobs=(0.0,) * len(r), version=0) for r in responses
        )
        n = len(responses)
        return Group(prompt_index=index, completions=completions, rewards=(0.0,) * n, advantages=(0.0,) * n)

    return [
        group(0, b"3+4=", [b"7", b"7\n", b"12\n", b"7"]),
        group(1, b"12+5=", [b"17\n", b"1", b"17"]),
        group(2, b"0+0=", [b"0", b"00\n"]),
        group(3, b"3+4=", [b"8", b"6\n"]),
    ]


def _plain(model: LanguageModel, tokens: torch.Tensor, mask: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """The definition: every row's whole sequence through the model, its response positions read."""
    whole = torch.log_softmax(model(tokens[:, :-1]).float().masked_fill(~allowed, float("-inf")), -1)
    chosen = whole.gather(-1, tokens[:, 1:].unsqueeze(-1)).squeeze(-1)
    return torch.where(mask, chosen, torch.zeros_like(chosen))


def _gradients(model: LanguageModel, logprobs: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad()
    weights = torch.arange(1.0, 1.0 + logprobs.numel()).view(logprobs.shape)  # every position its own weight
    (logprobs * weights).sum().backward()  # type: ignore[no-untyped-call]
    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]


def test_shared_prompts_give_the_plain_forwards_logprobs_and_gradients(tiny: Model) -> None:
    torch.manual_seed(0)
    model = LanguageModel(tiny)
    batch = make_batch(_groups())
    allowed = allowed_mask(tiny.vocab, [*DIGITS, 10])
    want = _plain(model, batch.tokens, batch.mask, allowed)
    expected = _gradients(model, want)
    got = response_logprobs(model, batch.tokens, batch.mask, allowed)
    torch.testing.assert_close(got, want.detach(), rtol=1e-5, atol=1e-6)
    assert float(got.detach()[~batch.mask].abs().sum()) == 0.0
    for g, e in zip(_gradients(model, got), expected, strict=True):  # fp32 rounding at each gradient's scale
        assert float((g - e).abs().max()) <= 1e-5 * float(e.abs().max())  # measured: 6e-7 (4e-8 in float64)


def _rows_embedded(model: LanguageModel, run: object) -> list[tuple[int, ...]]:
    seen: list[tuple[int, ...]] = []
    handle = model.embed.register_forward_hook(lambda _m, args, _out: seen.append(tuple(args[0].shape)))
    try:
        assert callable(run)
        run()
    finally:
        handle.remove()
    return seen


def test_each_distinct_prompt_runs_once_and_each_row_only_its_later_tokens(tiny: Model) -> None:
    torch.manual_seed(0)
    model = LanguageModel(tiny)
    batch = make_batch(_groups())
    seen = _rows_embedded(model, lambda: response_logprobs(model, batch.tokens, batch.mask))
    # length 4: "3+4=" and "0+0=" once each, then the 6 rows answering them with 2-3 tokens feed 1-2 of them;
    # length 5: "12+5=" once, then its 2 rows of 2-3 tokens
    assert seen == [(2, 4), (4, 2), (1, 5), (2, 2)]
    assert sum(a * b for a, b in seen) == 8 + 8 + 5 + 4  # against 11 rows x 7 positions = 77 in the plain forward


def test_a_model_that_recomputes_or_drops_activations_runs_the_plain_forward(tiny: Model) -> None:
    """The cached prefix is not recomputed by activation checkpointing, and a prompt's dropout would be
    shared by its rows: such a model in training runs every row whole, as before."""
    batch = make_batch(_groups())
    for change in ({"activation_checkpointing": True}, {"dropout": 0.1}):
        torch.manual_seed(0)
        model = LanguageModel(dataclasses.replace(tiny, **change)).train()
        seen = _rows_embedded(model, lambda m=model: response_logprobs(m, batch.tokens, batch.mask))
        assert seen == [(11, 7)]
        model.eval()
        seen = _rows_embedded(model, lambda m=model: response_logprobs(m, batch.tokens, batch.mask))
        assert seen[0] == (2, 4)  # no training, nothing recomputed or dropped: shared


def test_the_layout_reads_prompts_from_the_mask_and_refuses_a_row_without_a_response() -> None:
    batch = make_batch(_groups())
    plan = layout(batch.tokens, batch.mask)
    assert plan.prompt_length == [4] * 4 + [5] * 3 + [4] * 4
    assert plan.response_length == [1, 2, 3, 1, 3, 1, 2, 1, 3, 1, 2]
    assert plan.owner == [0] * 4 + [0] * 3 + [1, 1, 0, 0]
    assert plan.prompts == {4: [list(b"3+4="), list(b"0+0=")], 5: [list(b"12+5=")]}
    empty = batch.mask.clone()
    empty[2] = False
    with pytest.raises(ValueError, match="at least one response token"):
        layout(batch.tokens, empty)
