"""Per-token log-probabilities of response tokens, and the GRPO loss on them.

The loss, per response token t of sequence i (advantage A_i, the generator's logprob q_t):

    ratio_t    = exp(logp_t - q_t)                     # against the GENERATOR's logprobs
    surrogate  = min(ratio_t * A_i, clip(ratio_t, 1 - eps_low, 1 + eps_high) * A_i)
    kl_t       = exp(ref_t - logp_t) - (ref_t - logp_t) - 1          # k3, only when beta > 0
    loss_t     = -surrogate + beta * kl_t

averaged over each sequence's response tokens, then over the sequences of the batch. The ratio is
taken against the sampler's logprobs, not against a detached copy of the trainer's own (torchforge's
``exp(logp - logp.detach())`` is 1 by construction): with samples up to ``max_policy_age`` versions
old that ratio is the importance correction asynchronous RL needs, and the clip bounds it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


def masked_logits(logits: torch.Tensor, allowed: torch.Tensor | None, temperature: float = 1.0) -> torch.Tensor:
    """Logits of the distribution a generator samples from: scaled by temperature, disallowed tokens at -inf.

    The generator and the trainer both call this, so their distributions are the same by construction.
    Temperature 0 means greedy decoding; its logprobs are reported at temperature 1.
    """
    logits = logits.float()  # the softmax in fp32, whatever the matmuls ran in
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    if allowed is not None:
        logits = logits.masked_fill(~allowed.to(logits.device), float("-inf"))
    return logits


def response_logprobs(
    model: nn.Module,
    tokens: torch.Tensor,
    mask: torch.Tensor,
    allowed: torch.Tensor | None = None,
    temperature: float = 1.0,
) -> torch.Tensor:
    """(B, T - 1) float32: log p(tokens[:, t + 1] | tokens[:, : t + 1]) where ``mask``, 0 elsewhere."""
    logits = masked_logits(model(tokens[:, :-1]), allowed, temperature)
    targets = tokens[:, 1:]
    picked = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    # where, not a product: a prompt or pad token outside the allowed set has logprob -inf, and -inf * 0 is NaN
    return torch.where(mask, picked, torch.zeros_like(picked))


@dataclass(frozen=True, kw_only=True)
class Clip:
    low: float = 0.2  # ratio floor 1 - low, binding where the advantage is negative
    high: float = 0.2  # ratio ceiling 1 + high, binding where it is positive (DAPO's clip-higher raises it)

    def __post_init__(self) -> None:
        if not 0 <= self.low < 1 or self.high < 0:
            raise ValueError(f"clip: need 0 <= low < 1 and high >= 0, got low={self.low} high={self.high}")


@dataclass(frozen=True, kw_only=True)
class LossParts:
    loss: torch.Tensor  # the scalar to differentiate
    clipped_fraction: float  # of response tokens where the clip took the gradient away
    ratio_mean: float
    kl_mean: float  # 0 when beta is 0


def _per_sequence_mean(per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    weights = mask.to(per_token.dtype)
    return (per_token * weights).sum(-1) / weights.sum(-1).clamp(min=1)


def grpo_loss(
    logprobs: torch.Tensor,
    sampler_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip: Clip,
    beta: float = 0.0,
    ref_logprobs: torch.Tensor | None = None,
) -> LossParts:
    """The GRPO loss over (B, T) per-token tensors; ``advantages`` is (B,)."""
    if beta > 0 and ref_logprobs is None:
        raise ValueError("beta > 0 needs the reference model's logprobs")
    zero = torch.zeros_like(logprobs)
    log_ratio = torch.where(mask, logprobs - sampler_logprobs, zero)
    ratio = torch.exp(log_ratio)
    a = advantages[:, None]
    unclipped = ratio * a
    clipped = torch.clamp(ratio, 1 - clip.low, 1 + clip.high) * a
    per_token = -torch.minimum(unclipped, clipped)
    kl = zero
    if beta > 0:
        assert ref_logprobs is not None
        delta = torch.where(mask, ref_logprobs - logprobs, zero)
        kl = torch.exp(delta) - delta - 1
        per_token = per_token + beta * kl
    loss = _per_sequence_mean(per_token, mask).mean()
    with torch.no_grad():
        tokens = mask.sum().clamp(min=1)
        was_clipped = (clipped < unclipped) & mask
        return LossParts(
            loss=loss,
            clipped_fraction=float(was_clipped.sum() / tokens),
            ratio_mean=float((ratio * mask).sum() / tokens),
            kl_mean=float((kl * mask).sum() / tokens),
        )
