from __future__ import annotations

import pytest
import torch
from trainer.config import Model
from trainer.model.transformer import LanguageModel
from trainer.rl.advantages import score
from trainer.rl.episode import make_batch
from trainer.rl.generate import TorchGenerator, snapshot
from trainer.rl.loss import response_logprobs
from trainer.rl.tokens import DIGITS, allowed_mask

PROMPTS = [list(b"3+4="), list(b"12+5="), list(b"0+0=")]  # two lengths: two sampling batches, one ragged training batch


def _generator(cfg: Model, seed: int = 0) -> tuple[LanguageModel, TorchGenerator]:
    torch.manual_seed(seed)
    policy = LanguageModel(cfg)
    generator = TorchGenerator(cfg, seed=seed)
    generator.load_weights(snapshot(policy), version=0)
    return policy, generator


@pytest.mark.parametrize(
    ("allowed", "temperature", "ends"), [(None, 1.0, ()), ("digits", 0.7, (ord("7"),)), ("digits", 0.7, (48, 55))]
)
def test_generator_and_trainer_logprobs_agree(
    tiny: Model, allowed: str | None, temperature: float, ends: tuple[int, ...]
) -> None:
    policy, generator = _generator(tiny)
    mask = allowed_mask(tiny.vocab, DIGITS) if allowed else None
    groups = generator.generate(PROMPTS, 4, max_tokens=5, temperature=temperature, allowed=mask, ends=ends)
    assert [len(g) for g in groups] == [4, 4, 4]
    completions = [c for g in groups for c in g]
    if mask is not None:
        assert all(t in DIGITS for c in completions for t in c.response)
    if ends:
        assert all(c.response[-1] in ends or len(c.response) == 5 for c in completions)
        assert not any(t in ends for c in completions for t in c.response[:-1])
        assert any(len(c.response) < 5 for c in completions)  # some did end early: the test is not vacuous
    rewards = [[float(i % 2) for i in range(4)] for _ in groups]  # any non-constant rewards: every group kept
    batch = make_batch(score([0, 1, 2], groups, rewards).kept)
    with torch.no_grad():
        trainer = response_logprobs(policy, batch.tokens, batch.mask, mask, temperature)
    assert float((trainer - batch.sampler_logprobs).abs().max()) < 1e-5  # the GRPO ratio is 1 at equal weights
    assert int(batch.mask.sum()) == sum(len(c.response) for c in completions)


def test_samples_are_reproducible_from_the_seed(tiny: Model) -> None:
    runs = [_generator(tiny, seed=1)[1].generate(PROMPTS, 3, max_tokens=3, temperature=1.0) for _ in range(2)]
    assert runs[0] == runs[1]
    other = _generator(tiny, seed=1)[1]
    other.rng.manual_seed(2)
    assert other.generate(PROMPTS, 3, max_tokens=3, temperature=1.0) != runs[0]


def test_greedy_is_the_argmax(tiny: Model) -> None:
    policy, generator = _generator(tiny)
    (group,) = generator.generate([PROMPTS[0]], 2, max_tokens=1, temperature=0.0)
    with torch.no_grad():
        want = int(policy(torch.tensor([PROMPTS[0]]))[0, -1].argmax())
    assert [c.response for c in group] == [(want,), (want,)]


def test_weights_after_a_sync_equal_the_policy_bit_for_bit_and_are_a_copy(tiny: Model) -> None:
    policy, generator = _generator(tiny)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=0.1)
    policy(torch.tensor([PROMPTS[0]])).sum().backward()
    optimizer.step()
    generator.load_weights(snapshot(policy), version=1)
    assert generator.version == 1
    theirs = generator.model.state_dict()
    for name, tensor in policy.state_dict().items():
        assert torch.equal(tensor, theirs[name]), name
        assert tensor.data_ptr() != theirs[name].data_ptr()
    optimizer.step()  # the optimizer writes on: the generator's version 1 stays as it was sent
    assert any(not torch.equal(t, theirs[n]) for n, t in policy.state_dict().items())
    (group,) = generator.generate([PROMPTS[0]], 1, max_tokens=1, temperature=1.0)
    assert group[0].version == 1


def test_weights_that_do_not_fit_are_refused(tiny: Model) -> None:
    policy, generator = _generator(tiny)
    state = snapshot(policy)
    with pytest.raises(ValueError, match="missing"):
        generator.load_weights({k: v for k, v in state.items() if k != "norm.weight"}, 1)
    with pytest.raises(ValueError, match="is \\(3,\\)"):
        generator.load_weights(state | {"norm.weight": torch.ones(3)}, 1)
    assert generator.version == 0
    with pytest.raises(RuntimeError, match="no weights"):
        TorchGenerator(tiny, seed=0).generate(PROMPTS, 1, max_tokens=1, temperature=1.0)


def test_a_bf16_snapshot_is_a_cast_copy(tiny: Model) -> None:
    policy, _ = _generator(tiny)
    state = snapshot(policy, torch.bfloat16)
    assert all(t.dtype == torch.bfloat16 for t in state.values())
    assert torch.equal(state["embed.weight"], policy.embed.weight.detach().bfloat16())
