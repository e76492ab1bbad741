"""One GRPO optimizer step: a batch, the policy and its optimizer in, statistics out; nothing global.

The single-process loop (loop.py) calls it; the distributed trainer computes the same loss
(loss.grpo_loss) inside its commit protocol (policy.py), where torchft decides whether the step commits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from trainer.rl.episode import Batch
from trainer.rl.loss import Aggregation, Clip, entropies, grpo_loss, picked, response_logprobs, token_logprobs
from trainer.rl.stats import PolicyStats, summarize


@dataclass(frozen=True, kw_only=True)
class StepSettings:
    clip: Clip = field(default_factory=Clip)
    aggregation: Aggregation = field(default_factory=Aggregation)  # rl.loss_agg, its horizon rl.max_tokens
    beta: float = 0.0  # k3 KL weight against the reference model; 0: no reference forward at all
    temperature: float = 1.0  # the generator's: the trainer scores the distribution that was sampled
    grad_clip: float = 1.0  # total gradient norm; 0: off
    allowed: torch.Tensor | None = None  # (V,) bool: the generator's token mask, or None for the whole vocabulary


@dataclass(frozen=True, kw_only=True)
class StepStats:
    loss: float
    grad_norm: float
    policy: PolicyStats | None  # clip fraction, importance ratio, entropy, KL over the batch (None: no tokens)
    applied: bool  # False: the loss or gradient norm was not finite and the optimizer did not step


def rl_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    settings: StepSettings,
    reference: nn.Module | None = None,
) -> StepStats:
    """Forward, GRPO loss, backward, clip, step. A non-finite loss or gradient norm does not step."""
    if settings.beta > 0 and reference is None:
        raise ValueError("beta > 0 needs a reference model")
    device = next(model.parameters()).device
    batch = batch.to(device)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    distributions = token_logprobs(model, batch.tokens, batch.mask, settings.allowed, settings.temperature)
    logprobs = picked(distributions, batch.tokens, batch.mask)
    ref_logprobs = None
    if settings.beta > 0:
        assert reference is not None
        with torch.no_grad():
            ref_logprobs = response_logprobs(
                reference, batch.tokens, batch.mask, settings.allowed, settings.temperature
            )
    parts = grpo_loss(
        logprobs,
        batch.sampler_logprobs,
        batch.advantages,
        batch.mask,
        clip=settings.clip,
        beta=settings.beta,
        ref_logprobs=ref_logprobs,
        aggregation=settings.aggregation,
        entropy=entropies(distributions, batch.mask),
    )
    parts.loss.backward()  # type: ignore[no-untyped-call]
    limit = settings.grad_clip if settings.grad_clip > 0 else math.inf
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), limit))
    loss = float(parts.loss.detach())
    applied = math.isfinite(loss) and math.isfinite(grad_norm)
    if applied:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return StepStats(
        loss=loss,
        grad_norm=grad_norm,
        policy=summarize([parts.tally], expected=1),
        applied=applied,
    )
