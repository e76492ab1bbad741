"""Per-token log-probabilities of response tokens, and the GRPO loss on them.

The loss, per response token t of sequence i (advantage A_i, the generator's logprob q_t):

    ratio_t    = exp(logp_t - q_t)                     # against the GENERATOR's logprobs
    surrogate  = min(ratio_t * A_i, clip(ratio_t, 1 - eps_low, 1 + eps_high) * A_i)
    surrogate  = max(surrogate, dual * A_i)  where A_i < 0   # dual clip
    kl_t       = exp(ref_t - logp_t) - (ref_t - logp_t) - 1          # k3, only when beta > 0
    loss_t     = -surrogate + beta * kl_t

averaged over each sequence's response tokens, then over the sequences of the batch. The ratio is
taken against the sampler's logprobs, not against a detached copy of the trainer's own (torchforge's
``exp(logp - logp.detach())`` is 1 by construction): with samples up to ``max_policy_age`` versions
old that ratio is the importance correction asynchronous RL needs, and the clip bounds it.

The ratio's other side is the generator's number: PPO's clip leaves ``ratio * A`` unbounded where A < 0,
so one token claimed at wire.MIN_LOGPROB (a ratio up to e^87) made the gradient norm inf and the step
was skipped, every step such an answer was in (issue 39). Dual-clip PPO (Ye et al. 2020,
arXiv:1912.09729) caps that loss at ``dual * |A|`` with no gradient past it; verl does the same
(``compute_policy_loss_vanilla`` in ``verl/trainer/ppo/core_algos.py``: ``clip_ratio_c`` 3.0, and its
log-ratio clamped to [-20, 20] before exp, as here). An honest sample's ratio is near 1: neither binds.
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


LOG_RATIO = 20.0  # |logp - q| past this is no sample of the policy: e^20 = 4.9e8, and exp stays finite


@dataclass(frozen=True, kw_only=True)
class Clip:
    low: float = 0.2  # ratio floor 1 - low, binding where the advantage is negative
    high: float = 0.2  # ratio ceiling 1 + high, binding where it is positive (DAPO's clip-higher raises it)
    dual: float = 3.0  # where A < 0, the loss stops growing at ratio dual (dual-clip PPO; verl's clip_ratio_c)

    def __post_init__(self) -> None:
        if not 0 <= self.low < 1 or self.high < 0 or self.dual <= 1:
            raise ValueError(
                f"clip: need 0 <= low < 1, high >= 0 and dual > 1, got low={self.low} high={self.high} dual={self.dual}"
            )


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
    log_ratio = torch.where(mask, (logprobs - sampler_logprobs).clamp(-LOG_RATIO, LOG_RATIO), zero)
    ratio = torch.exp(log_ratio)
    a = advantages[:, None]
    unclipped = ratio * a
    clipped = torch.clamp(ratio, 1 - clip.low, 1 + clip.high) * a
    surrogate = torch.minimum(unclipped, clipped)
    per_token = -torch.where(a < 0, torch.maximum(surrogate, clip.dual * a), surrogate)
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
