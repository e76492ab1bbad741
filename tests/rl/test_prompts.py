from __future__ import annotations

import json
from pathlib import Path

import pytest
from trainer.rl.prompts import Problem, arithmetic_problems, parse_jsonl, read_jsonl, split

from contract.problem import Invalid


def test_the_arithmetic_task_has_every_one_digit_sum_written_four_ways() -> None:
    sums = arithmetic_problems(padded=False)
    assert len(sums) == 55
    assert Problem(prompt="3+4=", answer="7") in sums
    assert all(int(p.prompt[0]) + int(p.prompt[2]) == int(p.answer) <= 9 for p in sums)
    problems = arithmetic_problems()
    assert len(problems) == len(set(problems)) == 220
    assert {p for p in problems if p.prompt.endswith("3+4=") or p.prompt.endswith("3+04=")} == {
        Problem(prompt=text, answer="7") for text in ("3+4=", "03+4=", "3+04=", "03+04=")
    }
    for p in problems:
        a, b = p.prompt.removesuffix("=").split("+")
        assert int(a) + int(b) == int(p.answer) <= 9


def test_prompts_are_a_pure_function_of_seed_and_index() -> None:
    a, b = split(arithmetic_problems(padded=False), 11, seed=3), split(arithmetic_problems(padded=False), 11, seed=3)
    assert [a[i] for i in range(200)] == [b[i] for i in reversed(range(200))][::-1]
    assert [a[i] for i in (150, 7, 150)] == [b[150], b[7], b[150]]  # any order of access, the same answer
    other = split(arithmetic_problems(padded=False), 11, seed=4)
    assert [a[i] for i in range(44)] != [other[i] for i in range(44)]


def test_each_epoch_visits_every_training_problem_once_and_never_a_held_out_one() -> None:
    prompts = split(arithmetic_problems(padded=False), 11, seed=0)
    assert len(prompts.train) == 44
    assert len(prompts.held_out) == 11
    assert not set(prompts.train) & set(prompts.held_out)
    for epoch in range(3):
        seen = [prompts[epoch * 44 + i] for i in range(44)]
        assert sorted(seen, key=str) == sorted(prompts.train, key=str)
    assert [prompts[i] for i in range(44)] != [prompts[44 + i] for i in range(44)]
    # the held-out split depends on its own seed only: every training seed evaluates on the same problems
    assert split(arithmetic_problems(padded=False), 11, seed=9).held_out == prompts.held_out


def test_jsonl_from_a_path(tmp_path: Path) -> None:
    path = tmp_path / "gsm.jsonl"
    lines = [{"prompt": "1+1?", "answer": "2"}, {"prompt": "Half of 9?", "answer": 4.5}]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    assert read_jsonl(str(path)) == (Problem(prompt="1+1?", answer="2"), Problem(prompt="Half of 9?", answer="4.5"))
    assert read_jsonl(f"file://{path}") == read_jsonl(str(path))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"prompt": "a", "answer": "b"}\n{"prompt": "a"', "data.jsonl:2: not JSON"),
        ('["a", "b"]', "data.jsonl:1: a list, not an object"),
        ('{"prompt": "", "answer": "b"}', "data.jsonl:1: prompt: missing"),
        ('{"prompt": "a", "answer": null}', "data.jsonl:1: answer: missing"),
        ('{"prompt": "a", "answer": true}', "data.jsonl:1: answer: missing"),
        ("\n\n", "data.jsonl: no problems"),
    ],
)
def test_a_bad_line_is_one_line_naming_it(text: str, expected: str) -> None:
    with pytest.raises(Invalid) as error:
        parse_jsonl(text, "data.jsonl")
    assert len(error.value.lines) == 1
    assert error.value.lines[0].startswith(expected)
    assert "; " in error.value.lines[0]  # and says how to fix it


def test_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(Invalid, match="cannot read it"):
        read_jsonl(str(tmp_path / "missing.jsonl"))
    (tmp_path / "latin1.jsonl").write_bytes(b'{"prompt": "caf\xe9", "answer": "1"}')
    with pytest.raises(Invalid, match="cannot read it"):
        read_jsonl(str(tmp_path / "latin1.jsonl"))
