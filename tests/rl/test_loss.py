from __future__ import annotations

import math

import pytest
import torch
from trainer.config import Model
from trainer.model.transformer import LanguageModel
from trainer.rl import loss
from trainer.rl.episode import Completion, Group, make_batch
from trainer.rl.loss import Aggregation, Clip, entropies, grpo_loss, response_logprobs, token_logprobs
from trainer.rl.step import StepSettings, rl_step
from trainer.rl.tokens import DIGITS, allowed_mask

CLIP = Clip(low=0.2, high=0.3)


def test_the_loss_equals_the_formula_computed_by_hand() -> None:
    logprobs = torch.tensor([[-1.0, -0.5, 0.0], [0.0, -2.0, -0.1]])
    sampler = torch.tensor([[-1.2, -0.9, 0.0], [0.0, -1.5, -0.3]])
    mask = torch.tensor([[True, True, False], [False, True, True]])
    advantages = torch.tensor([1.0, -2.0])
    ref = torch.tensor([[-1.1, -0.4, 0.0], [0.0, -1.0, -0.2]])

    def token(lp: float, q: float, a: float, r: float, beta: float) -> float:
        ratio = math.exp(lp - q)
        surrogate = min(ratio * a, min(max(ratio, 1 - CLIP.low), 1 + CLIP.high) * a)
        surrogate = max(surrogate, CLIP.dual * a) if a < 0 else surrogate  # the dual clip
        return -surrogate + beta * (math.exp(r - lp) - (r - lp) - 1)

    for beta in (0.0, 0.05):
        row0 = (token(-1.0, -1.2, 1.0, -1.1, beta) + token(-0.5, -0.9, 1.0, -0.4, beta)) / 2
        row1 = (token(-2.0, -1.5, -2.0, -1.0, beta) + token(-0.1, -0.3, -2.0, -0.2, beta)) / 2
        parts = grpo_loss(logprobs, sampler, advantages, mask, clip=CLIP, beta=beta, ref_logprobs=ref)
        assert float(parts.loss) == pytest.approx((row0 + row1) / 2, rel=1e-6)
    # ratios: e^0.2 and e^0.4 (A > 0: the second, above 1.3, is clipped), e^-0.5 and e^0.2 (A < 0: the first,
    # below 0.8, is clipped)
    assert parts.clipped_fraction == pytest.approx(2 / 4)


def _grad(lp: float, q: float, a: float) -> float:
    logprobs = torch.tensor([[lp]], requires_grad=True)
    parts = grpo_loss(logprobs, torch.tensor([[q]]), torch.tensor([a]), torch.tensor([[True]]), clip=CLIP)
    parts.loss.backward()  # type: ignore[no-untyped-call]
    assert logprobs.grad is not None
    return float(logprobs.grad)


def test_clipping_is_one_sided_per_advantage_sign() -> None:
    up, down = math.log(1.5), math.log(0.5)  # ratio 1.5 (above 1 + 0.3) and 0.5 (below 1 - 0.2)
    assert _grad(up, 0.0, 1.0) == 0.0  # A > 0, ratio past the ceiling: no more push up
    assert _grad(up, 0.0, -1.0) == pytest.approx(1.5)  # A < 0: the ceiling does not bind, -A * ratio
    assert _grad(down, 0.0, -1.0) == 0.0  # A < 0, ratio under the floor: no more push down
    assert _grad(down, 0.0, 1.0) == pytest.approx(-0.5)  # A > 0: the floor does not bind
    assert _grad(0.1, 0.0, 1.0) == pytest.approx(-math.exp(0.1))  # inside the band: the plain ratio's gradient


def test_the_k3_term_is_zero_with_zero_gradient_at_the_reference() -> None:
    logprobs = torch.tensor([[-0.7, -1.3]], requires_grad=True)
    mask = torch.ones(1, 2, dtype=torch.bool)
    parts = grpo_loss(
        logprobs, logprobs.detach(), torch.zeros(1), mask, clip=CLIP, beta=0.1, ref_logprobs=logprobs.detach()
    )
    parts.loss.backward()  # type: ignore[no-untyped-call]
    assert float(parts.loss.detach()) == 0.0
    assert parts.kl_mean == 0.0
    assert logprobs.grad is not None
    assert torch.equal(logprobs.grad, torch.zeros(1, 2))
    ref = torch.tensor([[-0.2, -2.0]])
    parts = grpo_loss(logprobs, logprobs.detach(), torch.zeros(1), mask, clip=CLIP, beta=1.0, ref_logprobs=ref)
    expected = [math.exp(r - lp) - (r - lp) - 1 for r, lp in ((-0.2, -0.7), (-2.0, -1.3))]
    assert parts.kl_mean == pytest.approx(sum(expected) / 2)
    with pytest.raises(ValueError, match="reference"):
        grpo_loss(logprobs, logprobs, torch.zeros(1), mask, clip=CLIP, beta=0.1)


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.tensor([[51, 43, 52, 61, 55, 0], [50, 43, 50, 61, 52, 10]])  # "3+4=7" padded, "2+2=4\n"
    mask = torch.tensor([[False, False, False, True, False], [False, False, False, True, True]])
    return tokens, mask


@torch.no_grad()
def test_response_logprobs_score_each_response_token_given_what_precedes_it(tiny: Model) -> None:
    torch.manual_seed(0)
    model = LanguageModel(tiny).eval()
    tokens, mask = _batch()
    got = response_logprobs(model, tokens, mask)
    for b, p, n in ((0, 4, 1), (1, 4, 2)):
        for j in range(n):  # straight from the definition: the next-token distribution after the prefix
            prefix = tokens[b : b + 1, : p + j]
            want = torch.log_softmax(model(prefix)[0, -1].float(), -1)[tokens[b, p + j]]
            assert float(got[b, p - 1 + j]) == pytest.approx(float(want), abs=1e-5)
    assert float(got[~mask].abs().sum()) == 0.0


def test_the_head_at_the_response_positions_only_gives_the_full_forwards_values_and_gradients(tiny: Model) -> None:
    torch.manual_seed(0)
    model = LanguageModel(tiny)
    tokens, mask = _batch()
    digits = allowed_mask(tiny.vocab, [*DIGITS, 10])

    def gradients(logprobs: torch.Tensor) -> list[torch.Tensor]:
        model.zero_grad()
        (logprobs * torch.arange(1.0, 1.0 + logprobs.numel()).view(logprobs.shape)).sum().backward()  # type: ignore[no-untyped-call]
        return [p.grad.clone() for p in model.parameters() if p.grad is not None]

    whole = torch.log_softmax(model(tokens[:, :-1]).float().masked_fill(~digits, float("-inf")), -1)
    chosen = whole.gather(-1, tokens[:, 1:].unsqueeze(-1)).squeeze(-1)
    want = torch.where(mask, chosen, torch.zeros_like(chosen))  # every position's head, then the mask
    expected = gradients(want)
    got = response_logprobs(model, tokens, mask, digits)
    assert torch.allclose(got, want.detach(), atol=1e-6)
    assert len(expected) == len(list(model.parameters()))
    for g, e in zip(gradients(got), expected, strict=True):  # fp32 rounding at the gradients' scale (up to ~20)
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)


def test_a_token_mask_renormalizes_and_never_makes_nan(tiny: Model) -> None:
    torch.manual_seed(0)
    model = LanguageModel(tiny)
    tokens, mask = _batch()
    digits = allowed_mask(tiny.vocab, [*DIGITS, 10])
    masked = response_logprobs(model, tokens, mask, digits)
    plain = response_logprobs(model, tokens, mask)
    assert bool((masked[mask] > plain[mask]).all())  # the same token, a smaller support
    assert bool(torch.isfinite(masked).all())
    masked.sum().backward()  # type: ignore[no-untyped-call]
    assert all(p.grad is None or bool(torch.isfinite(p.grad).all()) for p in model.parameters())


def _groups() -> list[Group]:
    c = [
        Completion(prompt=(51, 43, 52, 61), response=(55,), logprobs=(0.0,), version=0),
        Completion(prompt=(51, 43, 52, 61), response=(54,), logprobs=(0.0,), version=0),
        Completion(prompt=(50, 43, 50, 61), response=(52, 10), logprobs=(0.0, 0.0), version=0),
    ]
    return [
        Group(prompt_index=0, completions=(c[0], c[1]), rewards=(1.0, 0.0), advantages=(0.7, -0.7)),
        Group(prompt_index=1, completions=(c[2], c[2]), rewards=(1.0, 0.5), advantages=(0.5, -0.5)),
    ]


def test_at_ratio_one_the_gradient_is_reinforce(tiny: Model) -> None:
    torch.manual_seed(0)
    model = LanguageModel(tiny)
    batch = make_batch(_groups())
    with torch.no_grad():  # the sampler's logprobs are the policy's own: ratio 1 exactly
        sampler = response_logprobs(model, batch.tokens, batch.mask)
    logprobs = response_logprobs(model, batch.tokens, batch.mask)
    grpo_loss(logprobs, sampler, batch.advantages, batch.mask, clip=CLIP).loss.backward()  # type: ignore[no-untyped-call]
    ours = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad()
    logprobs = response_logprobs(model, batch.tokens, batch.mask)
    weights = batch.mask.float()
    reinforce = -(batch.advantages * (logprobs * weights).sum(-1) / weights.sum(-1)).mean()
    reinforce.backward()  # type: ignore[no-untyped-call]
    theirs = [p.grad for p in model.parameters() if p.grad is not None]
    assert len(ours) == len(theirs) > 0
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


class _Refuses(torch.nn.Module):
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        raise AssertionError("the reference model ran with beta 0")


def test_rl_step_without_kl_never_runs_the_reference_and_skips_non_finite(tiny: Model) -> None:
    torch.manual_seed(0)
    model = LanguageModel(tiny)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    stats = rl_step(model, optimizer, make_batch(_groups()), StepSettings(), reference=_Refuses())
    assert stats.applied
    assert math.isfinite(stats.loss)
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    batch = make_batch(_groups())
    broken = type(batch)(**{**batch.__dict__, "advantages": torch.full_like(batch.advantages, math.nan)})
    after = {k: v.clone() for k, v in model.state_dict().items()}
    stats = rl_step(model, optimizer, broken, StepSettings())
    assert not stats.applied
    assert all(torch.equal(after[k], v) for k, v in model.state_dict().items())


def test_rl_step_with_kl_uses_the_reference(tiny: Model) -> None:
    torch.manual_seed(0)
    model, reference = LanguageModel(tiny), LanguageModel(tiny)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    stats = rl_step(model, optimizer, make_batch(_groups()), StepSettings(beta=0.1), reference=reference)
    assert stats.policy is not None
    assert stats.policy.kl_against == "reference"
    assert stats.policy.kl > 0
    with pytest.raises(ValueError, match="reference"):
        rl_step(model, optimizer, make_batch(_groups()), StepSettings(beta=0.1))


# --- Loss choices (rl.loss_agg, rl.clip_dual) against the formula by hand (issue 41) ---------------------------------
# Two sequences of 1 and 3 response tokens, at ratio 1 (logp = q): each token's loss is -A, with A = +1 and -2.
LP = torch.tensor([[-0.5, 0.0, 0.0, 0.0], [-1.0, -0.2, -0.3, -0.4]])
MASK = torch.tensor([[True, False, False, False], [True, True, True, False]])
ADV = torch.tensor([1.0, -2.0])


@pytest.mark.parametrize(
    ("aggregation", "expected"),
    [
        (Aggregation(), (-1.0 + 2.0) / 2),  # each sequence's token mean (-1; +2), then their mean
        (Aggregation(mode="token-mean"), (-1.0 + 3 * 2.0) / 4),  # DAPO: every token weighs 1/4
        (Aggregation(mode="seq-mean-token-sum-norm", horizon=4), (-1.0 / 4 + 3 * 2.0 / 4) / 2),  # Dr. GRPO: sums / 4
    ],
)
def test_each_aggregation_is_its_formula(aggregation: Aggregation, expected: float) -> None:
    parts = grpo_loss(LP, LP, ADV, MASK, clip=CLIP, aggregation=aggregation)
    assert float(parts.loss) == pytest.approx(expected)
    assert (parts.tally.tokens, parts.tally.clipped) == (4, 0)
    assert parts.tally.ratio_sum == pytest.approx(4.0)


def test_the_aggregations_agree_when_every_completion_runs_to_the_horizon() -> None:
    lp, mask = LP[:, :3], torch.ones(2, 3, dtype=torch.bool)
    losses = [
        float(grpo_loss(lp, lp, ADV, mask, clip=CLIP, aggregation=Aggregation(mode=m, horizon=3)).loss)
        for m in ("seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm")
    ]
    assert losses == pytest.approx([0.5, 0.5, 0.5])


@pytest.mark.parametrize("mode", ["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"])
def test_shares_weighed_by_the_whole_batch_average_to_its_gradient(mode: str) -> None:
    """Two groups each training one sequence, their gradients averaged (torchft): the whole batch's gradient."""
    sampler = LP - torch.tensor([[0.1, 0, 0, 0], [0.3, -0.2, 0.05, 0]])  # ratios off 1, inside the clip

    def grad(rows: slice, aggregation: Aggregation) -> torch.Tensor:
        logprobs = LP.clone().requires_grad_(True)
        part = grpo_loss(logprobs[rows], sampler[rows], ADV[rows], MASK[rows], clip=CLIP, aggregation=aggregation)
        part.loss.backward()  # type: ignore[no-untyped-call]
        assert logprobs.grad is not None
        return logprobs.grad

    whole = grad(slice(0, 2), Aggregation(mode=mode, horizon=4))
    shares = [grad(slice(i, i + 1), Aggregation(mode=mode, horizon=4, sequences=2, tokens=4, shares=2)) for i in (0, 1)]
    torch.testing.assert_close((shares[0] + shares[1]) / 2, whole)
    standin = grad(slice(0, 1), Aggregation(mode=mode, horizon=4, sequences=2, tokens=4, shares=0))
    assert torch.equal(standin, torch.zeros_like(standin))


def test_the_dual_clip_is_a_setting() -> None:
    """A = -1 at ratio e^2 = 7.39: the loss is capped at dual * |A| for dual 3 and 5, and is the ratio's past it."""
    q, a, mask = torch.tensor([[-2.0]]), torch.tensor([-1.0]), torch.tensor([[True]])
    lp = torch.zeros(1, 1)
    for dual, expected in ((3.0, 3.0), (5.0, 5.0), (10.0, math.exp(2.0))):
        parts = grpo_loss(lp, q, a, mask, clip=Clip(dual=dual))
        assert float(parts.loss) == pytest.approx(expected)
        assert parts.tally.dual_clipped == (1 if dual < math.exp(2.0) else 0)
    with pytest.raises(ValueError, match="dual > 1"):
        Clip(dual=1.0)


def test_the_tally_is_the_formula_by_hand() -> None:
    """Ratios e^0.2, e^0.4 | e^-0.5, e^0.2 (as in the first test); entropy as given; k3 of the sampler."""
    logprobs = torch.tensor([[-1.0, -0.5, 0.0], [0.0, -2.0, -0.1]])
    sampler = torch.tensor([[-1.2, -0.9, 0.0], [0.0, -1.5, -0.3]])
    mask = torch.tensor([[True, True, False], [False, True, True]])
    entropy = torch.tensor([[0.5, 1.0, 9.0], [9.0, 1.5, 2.0]])  # 9: off the mask, never counted
    t = grpo_loss(logprobs, sampler, torch.tensor([1.0, -2.0]), mask, clip=CLIP, entropy=entropy).tally
    logs = (0.2, 0.4, -0.5, 0.2)
    assert (t.tokens, t.clipped, t.dual_clipped, t.kl_reference_sum) == (4, 2, 0, None)
    assert t.ratio_sum == pytest.approx(sum(math.exp(x) for x in logs))
    assert t.ratio_max == pytest.approx(math.exp(0.4))
    assert t.entropy_sum == pytest.approx(5.0)
    assert t.kl_sampler_sum == pytest.approx(sum(math.exp(x) - 1 - x for x in logs))


@torch.no_grad()
def test_the_entropy_is_the_masked_distributions(tiny: Model, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    model = LanguageModel(tiny).eval()
    tokens, mask = _batch()
    digits = allowed_mask(tiny.vocab, [*DIGITS, 10])
    entropy = entropies(token_logprobs(model, tokens, mask, digits, 0.7), mask)
    p = torch.softmax((model(tokens[:1, :4])[0, -1].float() / 0.7).masked_fill(~digits, float("-inf")), -1)
    want = -(p[digits] * p[digits].log()).sum()
    assert float(entropy[0, 3]) == pytest.approx(float(want), rel=1e-5)
    assert 0 < float(entropy[0, 3]) <= math.log(11)  # at most uniform over the 11 allowed tokens
    assert float(entropy[~mask].abs().sum()) == 0.0
    monkeypatch.setattr(loss, "ENTROPY_CHUNK", 1)  # a position at a time: the same numbers
    assert torch.equal(entropies(token_logprobs(model, tokens, mask, digits, 0.7), mask), entropy)
