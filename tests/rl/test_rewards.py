from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from trainer.rl.rewards import Rewards, exact, resolve

from contract.problem import Invalid


def test_exact_match() -> None:
    assert exact("3+4=", "7", "7") == 1.0
    assert exact("3+4=", " 7\n", "7") == 1.0
    assert exact("3+4=", "8", "7") == 0.0


def test_math_answers_through_math_verify() -> None:
    reward = resolve("math")
    assert reward("What is half of 1?", "The answer is $\\frac{1}{2}$", "0.5") == 1.0
    assert reward("x?", "so x = \\boxed{4}", "$4$") == 1.0
    assert reward("x?", "so x = \\boxed{5}", "$4$") == 0.0
    assert reward("x?", "no idea", "$4$") == 0.0


@pytest.fixture
def hooks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_rewards.py").write_text(
        "def length(prompt, completion, answer):\n    return len(completion) / 10\n"
        "def raises(prompt, completion, answer):\n    raise RuntimeError('sandbox died')\n"
        "def nan(prompt, completion, answer):\n    return float('nan')\n"
        "def text(prompt, completion, answer):\n    return 'high'\n"
        "def two(prompt, completion):\n    return 1.0\n"
        "VALUE = 3\n"
    )
    (tmp_path / "broken_rewards.py").write_text("import not_a_module_anywhere\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("my_rewards", "broken_rewards"):
        monkeypatch.delitem(sys.modules, name, raising=False)


@pytest.mark.usefixtures("hooks")
def test_a_hook_is_resolved_and_its_failures_counted_never_raised() -> None:
    assert resolve("my_rewards:length")("p", "12345", "a") == 0.5
    for name in ("raises", "nan", "text"):
        rewards = Rewards(resolve(f"my_rewards:{name}"))
        assert rewards("p", "c", "a") == 0.0
        assert rewards("p", "c", "a") == 0.0
        assert rewards.failures == 2, name
    rewards = Rewards(resolve("my_rewards:raises"))
    rewards("p", "c", "a")
    assert rewards.last_failure == "RuntimeError: sandbox died"
    assert math.isfinite(Rewards(resolve("my_rewards:length"))("p", "c", "a"))


@pytest.mark.usefixtures("hooks")
@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("exactly", "is neither exact, math nor module:function"),
        ("my_rewards:", "is neither"),
        ("no_such_module:f", "cannot import no_such_module (ModuleNotFoundError"),
        ("broken_rewards:f", "cannot import broken_rewards (ModuleNotFoundError"),
        ("my_rewards:missing", "has no function missing"),
        ("my_rewards:VALUE", "has no function VALUE"),
        ("my_rewards:two", "does not take (prompt, completion, answer)"),
    ],
)
def test_a_hook_that_cannot_be_used_is_one_line(spec: str, expected: str) -> None:
    with pytest.raises(Invalid) as error:
        resolve(spec, where="configs/rl/mine.yaml: reward")
    (line,) = error.value.lines
    assert line.startswith("configs/rl/mine.yaml: reward: ")
    assert expected in line
    assert "\n" not in line
