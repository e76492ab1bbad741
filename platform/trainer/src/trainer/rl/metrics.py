"""An RL run's live metrics (contract.metrics.RL), fed by the step reports and the generators' time.

The collectors are built through ``telemetry`` as the trainer's (``trainer.observe.metrics.RunMetrics``); given that
group's registry, they are served on the same /metrics endpoint, so the trainer's scrape finds them.
"""

from __future__ import annotations

import math

from contract.metrics import REFUSAL_REASONS, RL
from telemetry.families import Registry, families, registry
from trainer.rl.report import StepReport, check_state

AGE_BUCKETS = (0.0, 1.0, 2.0, 3.0, 4.0)  # versions: the bound is 1 or 2, more than 4 is already a broken run
# A tiny model on CPU syncs in a millisecond; 70B over the GPU network takes seconds (the rl README's model).
SYNC_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class RLMetrics:
    """RL's families, labelled run/region/group; ``max_policy_age``: past it a trained group is counted stale."""

    def __init__(self, run: str, region: str, group: int, *, max_policy_age: int, into: Registry | None = None) -> None:
        self.registry = into if into is not None else registry()
        buckets = {RL.sample_age: AGE_BUCKETS, RL.weight_sync_seconds: SYNC_BUCKETS}
        self.family = families(RL, self.registry, buckets)
        self.labels = {"run": run, "region": region, "group": str(group)}
        self.max_policy_age = max_policy_age
        for counter in (RL.stale_trained, RL.reissued, RL.generated_tokens, RL.trained_tokens):
            self.family[counter].inc(0, **self.labels)  # exposed from the start, at 0: the bound's alert reads it

    def observe(self, report: StepReport) -> None:
        """Update from one committed step."""
        family, labels = self.family, self.labels
        if not math.isnan(report.reward):  # NaN: the batch was surplus, no new rollouts; the last mean stays
            family[RL.reward_mean].set(report.reward, **labels)
        family[RL.policy_version].set(report.step, **labels)
        for age in report.ages:
            family[RL.sample_age].observe(age, **labels)
        family[RL.stale_trained].inc(sum(age > self.max_policy_age for age in report.ages), **labels)
        family[RL.reissued].inc(report.reissued, **labels)
        family[RL.generated_tokens].inc(report.generated_tokens, **labels)
        family[RL.trained_tokens].inc(report.trained_tokens, **labels)
        family[RL.weight_sync_seconds].observe(report.sync_seconds, **labels)
        policy = report.policy
        if policy is not None:
            family[RL.clip_fraction].set(policy.clip_fraction, **labels)
            family[RL.importance_ratio_mean].set(policy.ratio_mean, **labels)
            family[RL.importance_ratio_max].set(policy.ratio_max, **labels)
            family[RL.entropy].set(policy.entropy, **labels)
            family[RL.kl_sampler].set(policy.kl_sampler, **labels)
            if policy.kl_against == "reference":
                family[RL.kl_reference].set(policy.kl, **labels)
        if report.lengths is not None and report.lengths.completions:
            family[RL.response_tokens_mean].set(report.lengths.mean, **labels)
            family[RL.response_tokens_max].set(report.lengths.max, **labels)
            family[RL.truncated].set(report.lengths.truncated, **labels)

    def evaluated(self, greedy: float) -> None:
        """A held-out evaluation's accuracy, when it arrives: with its step's report, or after the next step's (an
        evaluation runs beside training, and a step may commit before it ends)."""
        self.family[RL.greedy_accuracy].set(greedy, **self.labels)

    def refused(self, generator: str, reason: str) -> None:
        """One answer of ``generator`` refused for ``reason`` (contract.metrics.REFUSAL_REASONS)."""
        if reason not in REFUSAL_REASONS:
            raise ValueError(f"refusal reason {reason!r} is not one of {', '.join(REFUSAL_REASONS)}")
        self.family[RL.refused_answers].inc(1, **self.labels, generator=generator, reason=reason)

    def generator(self, state: str, seconds: float, generator: str) -> None:
        """Book ``seconds`` of generator ``generator`` to ``state`` (a GeneratorTime's observer)."""
        self.family[RL.generator_seconds].inc(seconds, **self.labels, generator=generator, state=check_state(state))
