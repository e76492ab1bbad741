"""Per-token log-probabilities of response tokens, and the GRPO loss on them.

The loss, per response token t of sequence i (advantage A_i, the generator's logprob q_t):

    ratio_t    = exp(logp_t - q_t)                     # against the GENERATOR's logprobs
    surrogate  = min(ratio_t * A_i, clip(ratio_t, 1 - eps_low, 1 + eps_high) * A_i)
    surrogate  = max(surrogate, dual * A_i)  where A_i < 0   # dual clip
    kl_t       = exp(ref_t - logp_t) - (ref_t - logp_t) - 1          # k3, only when beta > 0
    loss_t     = -surrogate + beta * kl_t

summed with ``Aggregation``'s weights (rl.loss_agg: today's mean per sequence then over sequences, DAPO's
token mean, or Dr. GRPO's constant normaliser) over the whole step's batch. The ratio is
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

from trainer.config import Model
from trainer.model.prefix import shared_logits
from trainer.rl.settings import LOSS_AGGS, SEQUENCE_MEAN, TOKEN_MEAN
from trainer.rl.stats import Tally


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


def token_logprobs(
    model: nn.Module,
    tokens: torch.Tensor,
    mask: torch.Tensor,
    allowed: torch.Tensor | None = None,
    temperature: float = 1.0,
) -> torch.Tensor:
    """(N, V) float32: the log-distribution each response token (``mask``'s N positions of ``tokens[:, 1:]``,
    row-major) is drawn from, for ``picked`` and ``entropies``. The head and the softmax run at those positions
    only: a prompt position's distribution is never read. Rows that share a prompt (a GRPO group) run it
    once (model/prefix.py), unless the model recomputes or drops activations in training (checkpointing,
    dropout), which the cached prefix does not."""
    if not _shares_prompts(model):
        return torch.log_softmax(masked_logits(model(tokens[:, :-1], at=mask), allowed, temperature), dim=-1)
    logits, index = shared_logits(model, tokens, mask)
    return torch.log_softmax(masked_logits(logits, allowed, temperature), dim=-1).index_select(0, index)


def _shares_prompts(model: nn.Module) -> bool:
    cfg = getattr(model, "cfg", None)
    if not isinstance(cfg, Model):
        return False
    return not (model.training and (cfg.activation_checkpointing or cfg.dropout > 0))


def picked(distributions: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T - 1): each target token's logprob in ``token_logprobs``' distributions where ``mask``, 0 elsewhere."""
    chosen = distributions.gather(-1, tokens[:, 1:][mask].unsqueeze(-1)).squeeze(-1)
    return chosen.new_zeros(mask.shape).masked_scatter(mask, chosen)


ENTROPY_CHUNK = 1024  # positions at a time: at a 128k vocabulary, 0.5 GB of float32 per temporary (two live)


@torch.no_grad()
def entropies(distributions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T - 1) nats, no gradient: each masked position's entropy, 0 elsewhere. entr(p) = -p log p is 0 at
    p = 0, so a disallowed token's -inf logprob adds nothing. A chunk of positions at a time: the whole (N, V)
    at once would be another copy of the logits, twice."""
    entropy = distributions.new_empty(distributions.shape[0])
    chunks = zip(torch.split(distributions, ENTROPY_CHUNK), torch.split(entropy, ENTROPY_CHUNK), strict=True)
    for rows, out in chunks:
        out.copy_(torch.special.entr(rows.exp()).sum(-1))
    return entropy.new_zeros(mask.shape).masked_scatter(mask, entropy)


def response_logprobs(
    model: nn.Module,
    tokens: torch.Tensor,
    mask: torch.Tensor,
    allowed: torch.Tensor | None = None,
    temperature: float = 1.0,
) -> torch.Tensor:
    """(B, T - 1) float32: log p(tokens[:, t + 1] | tokens[:, : t + 1]) where ``mask``, 0 elsewhere."""
    return picked(token_logprobs(model, tokens, mask, allowed, temperature), tokens, mask)


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
class Aggregation:
    """Per-token weights that sum a step's per-token losses into one scalar, over the WHOLE batch.

    * ``seq-mean-token-mean``: each sequence's mean over its tokens, then the mean over sequences. A long
      completion's tokens weigh less than a short one's.
    * ``token-mean``: every token of the batch weighs the same (DAPO).
    * ``seq-mean-token-sum-norm``: each sequence's token SUM over a constant, ``horizon`` (rl.max_tokens),
      then the mean over sequences (Dr. GRPO's constant normaliser). verl sums over the sequences instead of
      averaging; the mean keeps the scale the batch size's, equal to token-mean when every completion runs to
      ``horizon``.

    A call may hold one share of the batch (a group's place in the quorum, a rank's part of that) while the
    gradients of ``shares`` shares are averaged (torchft over the groups, FSDP over a group's ranks):
    ``sequences`` and ``tokens`` are then the whole batch's, and each share's loss is scaled by ``shares`` so
    that the average of their gradients is the whole batch's. 0 shares: a stand-in with no weight (a group
    healing, a rank with no group of its own, which keeps its collectives but adds nothing).
    """

    mode: str = SEQUENCE_MEAN
    horizon: int = 1
    sequences: int | None = None  # None: the call holds the whole batch
    tokens: int | None = None
    shares: int = 1

    def __post_init__(self) -> None:
        if self.mode not in LOSS_AGGS:
            raise ValueError(f"loss aggregation {self.mode!r} is not one of {', '.join(LOSS_AGGS)}")
        if self.horizon < 1 or self.shares < 0:
            raise ValueError(f"aggregation: need horizon >= 1 and shares >= 0, got {self.horizon} and {self.shares}")

    def weights(self, mask: torch.Tensor) -> torch.Tensor:
        """(B, T) float32 weights, 0 off ``mask``: the loss is ``(per_token * weights).sum()``."""
        on = mask.float()
        sequences = self.sequences if self.sequences is not None else mask.shape[0]
        if self.mode == TOKEN_MEAN:
            tokens = self.tokens if self.tokens is not None else int(mask.sum())
            scale = on / max(tokens, 1)
        elif self.mode == SEQUENCE_MEAN:
            scale = on / on.sum(-1, keepdim=True).clamp(min=1) / max(sequences, 1)
        else:
            scale = on / (self.horizon * max(sequences, 1))
        return scale * self.shares


@dataclass(frozen=True, kw_only=True)
class LossParts:
    loss: torch.Tensor  # the scalar to differentiate
    tally: Tally  # this call's tokens: clipped, ratios, entropy, KL (stats.Tally; merge the shares')

    @property
    def clipped_fraction(self) -> float:
        return self.tally.clipped / max(self.tally.tokens, 1)

    @property
    def kl_mean(self) -> float:
        """The k3 against the reference per token; 0 without one."""
        return (self.tally.kl_reference_sum or 0.0) / max(self.tally.tokens, 1)


def grpo_loss(
    logprobs: torch.Tensor,
    sampler_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip: Clip,
    beta: float = 0.0,
    ref_logprobs: torch.Tensor | None = None,
    aggregation: Aggregation | None = None,
    entropy: torch.Tensor | None = None,
) -> LossParts:
    """The GRPO loss over (B, T) per-token tensors; ``advantages`` is (B,); ``entropy`` (B, T) only feeds the tally."""
    if beta > 0 and ref_logprobs is None:
        raise ValueError("beta > 0 needs the reference model's logprobs")
    zero = torch.zeros_like(logprobs)
    log_ratio = torch.where(mask, (logprobs - sampler_logprobs).clamp(-LOG_RATIO, LOG_RATIO), zero)
    ratio = torch.exp(log_ratio)
    a = advantages[:, None]
    unclipped = ratio * a
    clipped = torch.clamp(ratio, 1 - clip.low, 1 + clip.high) * a
    surrogate = torch.minimum(unclipped, clipped)
    dual = (a < 0) & (surrogate < clip.dual * a)
    per_token = -torch.where(a < 0, torch.maximum(surrogate, clip.dual * a), surrogate)
    kl = zero
    if beta > 0:
        assert ref_logprobs is not None
        delta = torch.where(mask, ref_logprobs - logprobs, zero)
        kl = torch.exp(delta) - delta - 1
        per_token = per_token + beta * kl
    weights = (aggregation or Aggregation()).weights(mask)
    loss = (per_token * weights).sum()
    with torch.no_grad():
        on = mask.float()
        sampler_kl = (ratio - 1 - log_ratio) * on  # k3 with the sampler's tokens: r - 1 - log r, r = p / q
        tally = Tally(
            tokens=int(mask.sum()),
            clipped=int(((clipped < unclipped) & mask).sum()),
            dual_clipped=int((dual & mask).sum()),
            ratio_sum=float((ratio * on).sum()),
            ratio_max=float(ratio[mask].max()) if bool(mask.any()) else 0.0,
            entropy_sum=float((entropy * on).sum()) if entropy is not None else 0.0,
            kl_sampler_sum=float(sampler_kl.sum()),
            kl_reference_sum=float((kl * on).sum()) if beta > 0 else None,
        )
    return LossParts(loss=loss, tally=tally)
