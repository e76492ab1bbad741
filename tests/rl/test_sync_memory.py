"""The weight sync's memory, accounted from a sharded trainer group (``ft.group_size`` 2, FSDP2 over gloo) to a
generator of tensor parallel 2 (the fake vLLM): scripts/bench_rl_memory.py's run of ``tiny``, in buckets smaller
than the model, asserting what each process recorded it allocated and kept (its measured RSS peaks are the
README's table; they are not asserted here). Live: the run starts three processes."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from trainer.rl import hf

from tests.conftest import REPO
from tests.rl.conftest import model_config

pytestmark = pytest.mark.live  # the trainer group's two processes and the generator's

BUCKET = 32 << 10  # below the embedding (32 KiB in bf16) and most of a block: many buckets


@pytest.fixture(scope="module")
def run() -> Iterator[dict[str, Any]]:
    # Imported by name from scripts/, so that the processes it spawns import the same module for their targets.
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        bench = importlib.import_module("bench_rl_memory")
        yield bench.measure("tiny", BUCKET)
    finally:
        sys.path.remove(str(REPO / "scripts"))
        sys.modules.pop("bench_rl_memory", None)


def test_no_rank_holds_more_than_a_tensor_beyond_its_own_shard_and_only_the_sender_keeps_the_model(
    run: dict[str, Any],
) -> None:
    sender, other = run["ranks"]
    shapes = [torch.Size(s) for s in hf.shapes(model_config("tiny")).values()]
    params = sum(s.numel() for s in shapes)
    largest = 2 * max(s.numel() for s in shapes)  # bf16 bytes
    assert sender["params"] == params
    assert sender["buckets"] >= 10  # the model really went in many buckets
    assert sender["kept"] == 2 * params  # the whole model once, in bf16: no fp32 copy
    assert other["kept"] == 0  # the other rank keeps nothing
    padded_shard = -(-largest // 2)
    assert other["gathered"] <= padded_shard  # it only sent its shard, cast
    assert sender["gathered"] <= largest + 2 * padded_shard  # one whole tensor (padded) beside its own shard
    assert sender["buffer"] <= max(BUCKET, largest)  # the staging buffer: one bucket


def test_each_worker_keeps_its_slice_and_one_bucket(run: dict[str, Any]) -> None:
    params = run["ranks"][0]["params"]
    largest = max(BUCKET, 2 * 256 * 64)  # the embedding, bf16: it travels alone
    assert run["generator"]["exact"]  # each worker's slices are the trainer's weights in bf16, bit for bit
    workers = run["generator"]["workers"]
    assert [w["rank"] for w in workers] == [0, 1]
    for worker in workers:
        assert worker["buffer"] <= largest
        assert worker["largest_load"] <= largest
        assert 2 * params / 2 <= worker["held"] < 1.01 * (2 * params / 2)  # half of the bf16 model, the norms whole
