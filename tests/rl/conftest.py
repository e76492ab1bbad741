"""Shared helpers: the model sizes as configs/model/*.yaml define them."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import yaml
from trainer.config import Model

from tests.conftest import REPO
from tests.rl.fake_vllm import Engine, install

MODELS = REPO / "platform/trainer/configs/model"


def model_config(name: str, **changes: object) -> Model:
    data = yaml.safe_load((MODELS / f"{name}.yaml").read_text())
    return Model(**(data | changes))


def model_names() -> list[str]:
    return sorted(p.stem for p in Path(MODELS).glob("*.yaml"))


@pytest.fixture
def tiny() -> Model:
    return model_config("tiny", precision="fp32")


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """One intra-op thread: these tensors are tiny, and on shared cores a second thread mostly spins
    (measured: 30 GRPO steps of `tiny` took 11.1 s with two threads, 1.9 s with one, on a busy 2-core box)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> Engine:
    """A fake ``vllm`` for this test (fake_vllm.py): what VllmGenerator asked of it, and its workers."""
    return install(monkeypatch)


@pytest.fixture
def store() -> Any:
    """The TCP store the pairs meet in: the controller's in a run."""
    return dist.TCPStore(  # type: ignore[attr-defined]
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60)
    )


def run_ranks(target: Callable[..., None], world: int, *args: object, timeout_s: float = 120) -> list[int | None]:
    """``target(rank, *args)`` in ``world`` spawned processes, all started before any is joined (they meet in one
    process group); their exit codes."""
    spawn = multiprocessing.get_context("spawn")
    processes = [spawn.Process(target=target, args=(rank, *args)) for rank in range(world)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=timeout_s)
    return [process.exitcode for process in processes]
