"""Where completions end (issue 41): end-of-sequence ids from the tokenizer, stop strings, truncation, the tokens
after an end kept out of the batch, multi-token answers scored, and rl.allowed=digits in a real tokenizer's ids."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from trainer.rl.controller import Controller
from trainer.rl.ends import find_end
from trainer.rl.episode import Completion, Group, make_batch
from trainer.rl.generator_main import Masks
from trainer.rl.grpo import make_task, score_answers
from trainer.rl.prompts import Problem
from trainer.rl.settings import RL
from trainer.rl.tokens import DIGITS, ByteTokenizer, HFTokenizer, digit_ids

from contract.problem import Invalid
from tests.rl.bpe import EOS, digit_sums, train_bpe
from tests.rl.test_controller import Clock, started


@pytest.fixture(scope="module")
def bpe(tmp_path_factory: pytest.TempPathFactory) -> HFTokenizer:
    return HFTokenizer.from_folder(train_bpe(digit_sums(), tmp_path_factory.mktemp("bpe")))


def completion(response: list[int]) -> Completion:
    return Completion(
        prompt=(1,), response=tuple(response), logprobs=tuple(-0.1 * (k + 1) for k in range(len(response))), version=0
    )


def test_the_end_of_sequence_comes_from_the_tokenizers_files(bpe: HFTokenizer, tmp_path: Path) -> None:
    assert bpe.ends == (bpe.token_id(EOS),)  # tokenizer_config.json's eos_token, a string
    folder = train_bpe(digit_sums(), tmp_path)
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": EOS}}))
    assert HFTokenizer.from_folder(folder).ends == bpe.ends  # its dict form
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [3, 0]}))
    assert HFTokenizer.from_folder(folder).ends == (0, 3)  # generation_config.json first: what generate() stops on
    (folder / "generation_config.json").unlink()
    (folder / "tokenizer_config.json").unlink()
    assert HFTokenizer.from_folder(folder).ends == ()  # neither names one: completions end at max_tokens
    assert ByteTokenizer().ends == ()


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("generation_config.json", {"eos_token_id": 999}, r"eos_token_id 999 is not ids in \[0, 32\)"),
        ("tokenizer_config.json", {"eos_token": "</s>"}, "eos_token '</s>' is not in tokenizer.json"),
        ("generation_config.json", "{", "not readable JSON"),
    ],
)
def test_a_wrong_end_of_sequence_is_one_line(tmp_path: Path, name: str, content: object, says: str) -> None:
    folder = train_bpe(digit_sums(), tmp_path)
    (folder / name).write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(Invalid, match=says) as error:
        HFTokenizer.from_folder(folder)
    assert len(error.value.lines) == 1


def test_digits_are_the_tokens_whose_text_is_digits(bpe: HFTokenizer) -> None:
    """Issue 41: rl.allowed=digits meant byte ids 48-57 whatever the tokenizer (the letters P-Y in a real vocabulary)."""
    assert digit_ids(ByteTokenizer()) == DIGITS
    task = make_task(RL(max_tokens=3), bpe.vocab_size, bpe)
    assert task.allowed is not None
    allowed = task.allowed.nonzero().flatten().tolist()
    assert [bpe.decode([i]) for i in allowed if i not in bpe.ends] == list("0123456789")
    assert set(bpe.ends) <= set(allowed)  # a completion can end
    assert allowed != DIGITS


def test_a_token_set_the_tokenizer_cannot_express_is_one_line(tmp_path: Path) -> None:
    letters = HFTokenizer.from_folder(train_bpe([Problem(prompt="ab+cd=", answer="x")], tmp_path, vocab_size=12))
    with pytest.raises(Invalid, match=r"rl.allowed: digits: no token of the tokenizer is digits; set rl.allowed=''"):
        make_task(RL(), letters.vocab_size, letters)
    assert make_task(RL(allowed=""), letters.vocab_size, letters).allowed is None
    with pytest.raises(Invalid, match="token 57 is past the model's vocab 40"):
        make_task(RL(), 40, ByteTokenizer())


def test_exact_scores_a_multi_token_answer_up_to_its_end(bpe: HFTokenizer) -> None:
    """`12<eos>` scores 1 for answer 12; what follows the end is cut and never trained on."""
    (eos,) = bpe.ends
    task = make_task(RL(max_tokens=6), bpe.vocab_size, bpe)
    problem = Problem(prompt="3+9=", answer="12")
    twelve = bpe.encode("12")
    assert len(twelve) == 2
    group = [completion([*twelve, eos]), completion([*twelve, eos, *bpe.encode("77")]), completion(bpe.encode("1277"))]
    got = score_answers(task, [problem], [group])
    assert got.rewards == [[1.0, 1.0, 0.0]]
    assert [len(c.response) for c in got.groups[0]] == [3, 3, 4]
    assert got.groups[0][1].logprobs == group[1].logprobs[:3]
    assert got.truncated == 0  # 4 tokens of 6, no end: possible only where vLLM's context ran out; not max_tokens
    cut = tuple(got.groups[0])
    batch = make_batch([Group(prompt_index=0, completions=cut, rewards=(1.0, 1.0, 0.0), advantages=(0.5, 0.5, -1.0))])
    assert batch.mask.sum(dim=1).tolist() == [3, 3, 4]  # the tokens after the end are not in the loss
    assert float(batch.sampler_logprobs[1, 4:].abs().sum()) == 0.0  # nor their logprobs


def test_without_an_end_a_short_answer_never_scores() -> None:
    """The issue's finding (byte tokens, max_tokens 2, nothing ends a completion): a one-digit answer is followed by
    a second digit, and exact never scores: 160 of 160 groups scored zero. A stop string ends it."""
    task = make_task(RL(max_tokens=2), 256)
    problems = list(task.prompts.train[:8])
    every_two_digits = [[completion([ord(problem.answer), d]) for d in DIGITS] for problem in problems]
    got = score_answers(task, problems, every_two_digits)
    assert got.rewards == [[0.0] * 10] * len(problems)
    assert got.truncated == 10 * len(problems)
    stopped = make_task(RL(max_tokens=2, allowed="", stop=("\n",)), 256)
    newline = [[completion([ord(p.answer), ord("\n")])] for p in problems]
    assert score_answers(stopped, problems, newline).rewards == [[1.0]] * len(problems)


@pytest.mark.parametrize("stop", ["\n", "##", "2#"])
def test_a_stop_string_cuts_after_the_token_that_completes_it(stop: str) -> None:
    text = "1#2##3\n45"
    response = list(text.encode())
    ending = find_end(response, ByteTokenizer(), ends=(), stops=[stop], max_tokens=len(response))
    at = text.index(stop)
    assert ending.length == at + len(stop)  # through its last token, found by bisection
    assert ending.text == text[:at]  # the reward reads the text before it
    assert not ending.truncated


def test_the_first_end_wins_and_a_run_to_max_tokens_is_truncated() -> None:
    tokens = ByteTokenizer()
    both = find_end(list(b"12;3\n"), tokens, ends=(ord(";"),), stops=["\n"], max_tokens=8)
    assert (both.length, both.text, both.truncated) == (3, "12", False)
    stop_first = find_end(list(b"1\n2;"), tokens, ends=(ord(";"),), stops=["\n"], max_tokens=8)
    assert (stop_first.length, stop_first.text) == (2, "1")
    assert find_end(list(b"123"), tokens, ends=(), stops=[], max_tokens=3).truncated
    assert not find_end(list(b"12"), tokens, ends=(), stops=[], max_tokens=3).truncated


def test_the_controller_sends_the_tasks_tokens_cuts_and_counts(bpe: HFTokenizer) -> None:
    settings = RL(group_size=2, prompts_per_step=2, lease_prompts=2, held_out=4, max_tokens=3, task="arithmetic")
    task = dataclasses.replace(make_task(settings, bpe.vocab_size, bpe))
    c = Controller(settings, task, vocab=bpe.vocab_size, steps=10, clock=Clock())
    started(c)
    lease = c.lease("g", 0)
    assert lease["ends"] == list(bpe.ends)
    assert task.allowed is not None
    assert lease["allowed"] == task.allowed.nonzero().flatten().tolist()
    (eos,) = bpe.ends
    groups = []
    for index, _ in lease["prompts"]:
        right = bpe.encode(task.prompts[index].answer)
        groups.append({"index": index, "completions": [
            {"response": [*right, eos], "logprobs": [-0.5] * (len(right) + 1), "version": 0},
            {"response": bpe.encode("777"), "logprobs": [-0.5] * 3, "version": 0},
        ]})  # fmt: skip
    assert c.result("g", {"lease": lease["lease"], "groups": groups}) == 2
    assert (c.window.completions, c.window.truncated) == (4, 2)
    assert c.window.rewards == [1.0, 0.0, 1.0, 0.0]


def test_a_generator_samples_under_the_ids_its_lease_names() -> None:
    masks = Masks(32, torch.device("cpu"))
    assert masks.get(None) is None  # rl.allowed='': the whole vocabulary
    mask = masks.get([0, 3, 4])
    assert mask is not None
    assert mask.nonzero().flatten().tolist() == [0, 3, 4]
    assert masks.get([0, 3, 4]) is mask  # built once per set
