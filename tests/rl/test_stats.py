"""A step's statistics over its whole batch: shares' tallies merged, lengths and truncation from the groups."""

from __future__ import annotations

import pytest
from trainer.rl.episode import Completion, Group
from trainer.rl.stats import Tally, lengths, summarize

STOP = 10


def _group(*responses: tuple[int, ...]) -> Group:
    completions = tuple(Completion(prompt=(1,), response=r, logprobs=(-0.1,) * len(r), version=0) for r in responses)
    n = len(responses)
    return Group(prompt_index=0, completions=completions, rewards=(0.0,) * n, advantages=(0.0,) * n)


def test_truncated_is_run_to_max_tokens_without_ending() -> None:
    groups = [_group((5, 6, 7), (5, STOP)), _group((5, 6, STOP), (7,))]  # max_tokens 3: only the first is cut
    got = lengths(groups, max_tokens=3, stops={STOP})
    assert (got.completions, got.tokens, got.mean, got.max, got.truncated) == (4, 9, 2.25, 3, 0.25)
    assert lengths(groups, max_tokens=3, stops=set()).truncated == 0.5  # no stop: both of length 3


def test_shares_merge_into_the_batchs_fractions_not_a_mean_of_theirs() -> None:
    small = Tally(tokens=1, clipped=1, ratio_sum=2.0, ratio_max=2.0, entropy_sum=1.0, kl_sampler_sum=0.3)
    large = Tally(tokens=9, clipped=0, ratio_sum=9.0, ratio_max=1.1, entropy_sum=9.0, kl_sampler_sum=0.0)
    stats = summarize([small, large], expected=2)
    assert stats is not None
    assert stats.clip_fraction == pytest.approx(0.1)  # 1 of 10 tokens; the mean of the shares' would be 0.5
    assert [stats.ratio_mean, stats.ratio_max, stats.entropy] == pytest.approx([1.1, 2.0, 1.0])
    assert (stats.kl_against, stats.tokens, stats.shares) == ("sampler", 10, 2)
    with_ref = summarize([Tally(tokens=2, kl_reference_sum=0.5), Tally(tokens=2, kl_reference_sum=0.3)], expected=2)
    assert with_ref is not None
    assert with_ref.kl_against == "reference"
    assert with_ref.kl == pytest.approx(0.2)
    assert summarize([], expected=2) is None


def test_a_tally_from_another_process_is_read_or_refused() -> None:
    tally = Tally(
        tokens=3, clipped=1, dual_clipped=0, ratio_sum=3.3, ratio_max=1.5, entropy_sum=2.0, kl_sampler_sum=0.1
    )
    assert Tally.from_json(tally.to_json()) == tally
    assert Tally.from_json(None) is None
    assert Tally.from_json({**tally.to_json(), "tokens": "3"}) is None
    assert Tally.from_json({**tally.to_json(), "clipped": True}) is None
