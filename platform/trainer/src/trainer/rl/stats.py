"""A step's statistics over its WHOLE batch: what the policy did to it (Tally) and how long its completions ran.

The trainer computes its loss on shares of a step's batch (torchft's groups, and a sharded group's ranks), so
what it measures is summed per share (``Tally``: counts, sums and a max, which add up exactly) and the shares'
tallies are merged before anything is divided: the clip fraction of a step is clipped tokens over all of its
tokens, not the mean of each group's fraction. The lengths need no trainer: every group gets the same batch,
and the controller, which formed it, measures it (``lengths``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from trainer.rl.episode import Completion, Group


@dataclass(frozen=True, kw_only=True)
class Tally:
    """Sums over the response tokens of one share of a step; ``merge`` the shares' for the step's."""

    tokens: int = 0
    clipped: int = 0  # tokens where PPO's clip took the gradient away (either side)
    dual_clipped: int = 0  # tokens with A < 0 whose ratio passed the dual clip
    ratio_sum: float = 0.0  # importance ratio exp(logp - q), trainer over sampler
    ratio_max: float = 0.0
    entropy_sum: float = 0.0  # nats: the entropy of the (masked, tempered) distribution each token was drawn from
    # k3 of the sampler against the trainer, r - 1 - log r with r = exp(logp - q): an estimate of KL(sampler ||
    # policy) from the sampler's own tokens, >= 0 per token. What staleness (and engine numerics) cost.
    kl_sampler_sum: float = 0.0
    kl_reference_sum: float | None = None  # the loss's k3 against the reference model; None at kl_beta 0

    def merge(self, other: Tally) -> Tally:
        ref = (
            None
            if self.kl_reference_sum is None and other.kl_reference_sum is None
            else (self.kl_reference_sum or 0.0) + (other.kl_reference_sum or 0.0)
        )
        return Tally(
            tokens=self.tokens + other.tokens,
            clipped=self.clipped + other.clipped,
            dual_clipped=self.dual_clipped + other.dual_clipped,
            ratio_sum=self.ratio_sum + other.ratio_sum,
            ratio_max=max(self.ratio_max, other.ratio_max),
            entropy_sum=self.entropy_sum + other.entropy_sum,
            kl_sampler_sum=self.kl_sampler_sum + other.kl_sampler_sum,
            kl_reference_sum=ref,
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> Tally | None:
        """A tally another process reported; None when it is not one (a group with no share, a stray field)."""
        if not isinstance(data, Mapping):
            return None
        numbers = {
            k: data.get(k)
            for k in ("tokens", "clipped", "dual_clipped", "ratio_sum", "ratio_max", "entropy_sum", "kl_sampler_sum")
        }
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in numbers.values()):
            return None
        ref = data.get("kl_reference_sum")
        return cls(
            tokens=int(numbers["tokens"]),  # type: ignore[arg-type]
            clipped=int(numbers["clipped"]),  # type: ignore[arg-type]
            dual_clipped=int(numbers["dual_clipped"]),  # type: ignore[arg-type]
            ratio_sum=float(numbers["ratio_sum"]),  # type: ignore[arg-type]
            ratio_max=float(numbers["ratio_max"]),  # type: ignore[arg-type]
            entropy_sum=float(numbers["entropy_sum"]),  # type: ignore[arg-type]
            kl_sampler_sum=float(numbers["kl_sampler_sum"]),  # type: ignore[arg-type]
            kl_reference_sum=float(ref) if isinstance(ref, (int, float)) and not isinstance(ref, bool) else None,
        )


@dataclass(frozen=True, kw_only=True)
class PolicyStats:
    """A step's tally as the console, rl.jsonl and the metrics show it: per token, over every share reported."""

    clip_fraction: float
    dual_clip_fraction: float
    ratio_mean: float
    ratio_max: float
    entropy: float  # nats per token
    kl: float  # k3 against the reference when there is one (kl_beta > 0), else against the sampler
    kl_against: str  # "reference" or "sampler"
    kl_sampler: float
    tokens: int  # response tokens the merged tallies cover: the batch's when every share reported
    shares: int  # tallies merged
    expected: int  # tallies the step had (its quorum's groups x ranks); fewer: a group's report never came

    def to_json(self) -> dict[str, Any]:
        return {k: round(v, 6) if isinstance(v, float) else v for k, v in asdict(self).items()}


def summarize(tallies: Iterable[Tally], expected: int) -> PolicyStats | None:
    """The step's statistics from its shares' tallies; None when none reported a token."""
    shares = list(tallies)
    total = Tally()
    for t in shares:
        total = total.merge(t)
    if total.tokens == 0:
        return None
    n = total.tokens
    sampler = total.kl_sampler_sum / n
    ref = None if total.kl_reference_sum is None else total.kl_reference_sum / n
    return PolicyStats(
        clip_fraction=total.clipped / n,
        dual_clip_fraction=total.dual_clipped / n,
        ratio_mean=total.ratio_sum / n,
        ratio_max=total.ratio_max,
        entropy=total.entropy_sum / n,
        kl=sampler if ref is None else ref,
        kl_against="sampler" if ref is None else "reference",
        kl_sampler=sampler,
        tokens=n,
        shares=len(shares),
        expected=expected,
    )


@dataclass(frozen=True, kw_only=True)
class Lengths:
    """The response lengths of a step's batch, every completion of every group."""

    completions: int
    tokens: int  # response tokens: what the step trained on, over all groups
    mean: float
    max: int
    truncated: float  # the share that ran to max_tokens without ending

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"mean": round(self.mean, 3), "truncated": round(self.truncated, 4)}


def ended(completion: Completion, stops: Collection[int]) -> bool:
    """Whether the completion ended on its own: its last token is one that ends a completion."""
    return completion.response[-1] in stops


def lengths(groups: Iterable[Group], max_tokens: int, stops: Collection[int]) -> Lengths:
    """``groups``' response lengths; truncated: ``max_tokens`` long and not ended on a token of ``stops``."""
    sizes, cut = [], 0
    for group in groups:
        for c in group.completions:
            sizes.append(len(c.response))
            cut += len(c.response) >= max_tokens and not ended(c, stops)
    if not sizes:
        return Lengths(completions=0, tokens=0, mean=0.0, max=0, truncated=0.0)
    return Lengths(
        completions=len(sizes),
        tokens=sum(sizes),
        mean=sum(sizes) / len(sizes),
        max=max(sizes),
        truncated=cut / len(sizes),
    )
