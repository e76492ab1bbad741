"""The group shape: ft.group_size, its defaults from gkr's environment, shapes refused, shard-local state."""

from __future__ import annotations

import pytest
import torch
from trainer.config import ConfigError, compose
from trainer.distributed.group import fill_local, local_shards

from contract.names import GROUP_SIZE_ENV, REPLICA_GROUPS_ENV
from tests.trainer.conftest import CONFIG


def test_the_shape_defaults_to_the_environment_and_the_command_line_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (compose(CONFIG, ["run.name=x"]).ft.replica_groups, compose(CONFIG, ["run.name=x"]).ft.group_size) == (2, 1)
    monkeypatch.setenv(REPLICA_GROUPS_ENV, "4")
    monkeypatch.setenv(GROUP_SIZE_ENV, "2")
    cfg = compose(CONFIG, ["run.name=x"])
    assert (cfg.ft.replica_groups, cfg.ft.group_size) == (4, 2)
    assert compose(CONFIG, ["run.name=x", "ft.group_size=1"]).ft.group_size == 1
    monkeypatch.setenv(GROUP_SIZE_ENV, "two")
    with pytest.raises(ConfigError, match=f"\\${GROUP_SIZE_ENV}: expected a whole number, got 'two'"):
        compose(CONFIG, ["run.name=x"])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["ft.group_size=0"], "ft.group_size: must be at least 1 (got 0)"),
        (["ft.group_size=3"], "data.batch_size: 16 is not a multiple of ft.group_size 3"),
    ],
)
def test_shapes_that_cannot_run_are_one_line(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as error:
        compose(CONFIG, ["run.name=x", *overrides])
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_shard_local_state_round_trips_into_the_receivers_own_tensors() -> None:
    live = {"model": {"w": torch.zeros(3)}, "outer": [{"m": torch.ones(2)}], "step": 4}
    sent = local_shards({"model": {"w": torch.arange(3.0)}, "outer": [{"m": torch.full((2,), 5.0)}], "step": 9})
    got = fill_local(live, sent)
    assert torch.equal(got["model"]["w"], torch.arange(3.0))
    assert got["step"] == 9
    assert torch.equal(got["outer"][0]["m"], torch.full((2,), 5.0))
