"""The learning test with a real tokenizer (issue 41): a byte-level BPE tokenizer trained here on the task's text,
the `tiny` Llama with its 32-token vocabulary, answers that must end on the tokenizer's end of sequence (`7<eos>`:
a completion that writes a second digit instead, or runs to max_tokens, scores 0), the single-process loop. README "The learning test with a real tokenizer" has the
seeds measured."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import yaml
from trainer.config import Model
from trainer.rl.grpo import Task, make_task
from trainer.rl.loop import History, Loop, run
from trainer.rl.prompts import split
from trainer.rl.settings import from_dict
from trainer.rl.tokens import HFTokenizer

from tests.conftest import REPO
from tests.rl.bpe import digit_sums, train_bpe
from tests.rl.conftest import model_config

pytestmark = pytest.mark.live  # a GRPO learning run, in process

SETTINGS = dataclasses.replace(
    from_dict(yaml.safe_load((REPO / "platform/trainer/configs/rl/arithmetic.yaml").read_text())), max_tokens=3
)
# Sums up to 9: one digit, then the end of sequence. Sums up to 18 (two digits for 10-18) learned too slowly for
# a test here: held-out greedy 0.34 after 150 steps, and 0.41 after 200 for sums up to 12 at lr 2e-3 (README).
MAX_SUM = 9


def bpe_task(folder: Path, seed: int = 0) -> tuple[Model, Task]:
    """The tokenizer trained on the task's text, the `tiny` model with its vocabulary, the task in its ids."""
    tokenizer = HFTokenizer.from_folder(train_bpe(digit_sums(MAX_SUM), folder))
    cfg = model_config("tiny", precision="fp32", vocab=tokenizer.vocab_size)
    settings = dataclasses.replace(SETTINGS, seed=seed)
    task = make_task(settings, cfg.vocab, tokenizer)
    return cfg, dataclasses.replace(task, prompts=split(digit_sums(MAX_SUM), settings.held_out, settings.seed))


@pytest.fixture(scope="module")
def learned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Task, History]:
    cfg, task = bpe_task(tmp_path_factory.mktemp("bpe"))
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # conftest's one thread is per test, set after a module's fixture: 4x the CPU without
    try:
        return task, run(cfg, SETTINGS, task, loop=Loop())
    finally:
        torch.set_num_threads(before)


def test_tiny_learns_sums_that_end_on_the_tokenizers_eos(learned: tuple[Task, History]) -> None:
    task, history = learned
    assert task.ends
    assert max(task.ends) < 32
    assert len(task.tokenizer.encode("18")) == 2  # a number the tokenizer did not merge: two digit tokens
    (_, before), (_, after) = history.greedy[0], history.greedy[-1]
    assert before <= 0.1, history.greedy
    assert after >= 0.8, history.greedy
    assert history.counters.age_violations == 0


def test_completions_learn_to_end(learned: tuple[Task, History]) -> None:
    """At first most completions run to max_tokens without the end token; by the end almost none do."""
    _, history = learned
    first, last = history.truncated[0], history.truncated[-10:]
    assert first > 0.5 * SETTINGS.prompts_per_step * SETTINGS.group_size, history.truncated[:5]
    assert sum(last) <= 0.02 * 10 * SETTINGS.prompts_per_step * SETTINGS.group_size, last
