from __future__ import annotations

import pytest
import yaml
from trainer.rl.settings import RL, from_dict

from contract.problem import Invalid
from tests.conftest import REPO


def test_the_shipped_settings_are_valid() -> None:
    for path in sorted((REPO / "platform/trainer/configs/rl").glob("*.yaml")):
        assert isinstance(from_dict(yaml.safe_load(path.read_text()), str(path)), RL)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"group_size": 1}, "rl: group_size: must be at least 2 (got 1)"),
        ({"max_policy_age": -1}, "rl: max_policy_age: must be at least 0"),
        ({"temperature": 0}, "rl: temperature: must be greater than 0"),
        ({"clip_low": 1.0}, "rl: clip_low: must be less than 1"),
        ({"grup_size": 8}, "rl: grup_size"),
        ({"staleness": 2, "max_policy_age": 1}, "rl: staleness 2 > max_policy_age 1"),
        ({"allowed": "letters"}, "rl: allowed: 'letters' is not a token set"),
        ({"engine": "sglang"}, "rl.engine: 'sglang' is not an engine; set rl.engine to torch or vllm"),
        ({"gpu_memory_utilization": 1.0}, "rl: gpu_memory_utilization: must be less than 1"),
    ],
)
def test_bad_settings_are_one_line(data: dict[str, object], expected: str) -> None:
    with pytest.raises(Invalid) as error:
        from_dict(data)
    assert error.value.lines[0].startswith(expected), error.value.lines


def test_every_setting_has_a_default() -> None:
    assert from_dict({}) == RL()
