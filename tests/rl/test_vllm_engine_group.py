"""The weights reach vLLM's worker extension over a standalone gloo group of two processes (the engine's own
tests, in process: test_vllm_engine.py; live: the test starts both processes)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from trainer.model.transformer import LanguageModel
from trainer.rl import hf
from trainer.rl.generate import snapshot
from trainer.rl.vllm_worker import trainer_group
from trainer.rl.weight_sync import WeightSync, close_group

from tests.ports import free_port
from tests.rl.conftest import model_config, run_ranks
from tests.rl.fake_vllm import fake_worker, loaded

pytestmark = pytest.mark.live  # two processes in one gloo group


def _member(rank: int, port: int, folder: str, out: str) -> None:
    """Rank 0: the trainer, hosting the store. Rank 1: a vLLM worker (the real extension, a fake model runner)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = model_config("tiny", precision="fp32")
    state = snapshot(LanguageModel(cfg))
    # The worker extension's path over a standalone group (gloo here, NCCL on GPU), two versions.
    if rank == 0:
        group = trainer_group("127.0.0.1", port, 2, backend="gloo")
        sender = WeightSync(state, src=0)
        for version in (2, 3):
            sender.send({k: v + version for k, v in state.items()}, version, group=group)
        assert not dist.is_initialized()  # no default world was needed on either side
        close_group(group)  # before the process exits (weight_sync.close_group)
        return
    worker = fake_worker(rank=0)
    assert worker.meridian_open_sync("127.0.0.1", port, 2, folder, "float32", backend="gloo") == 1
    for version in (2, 3):
        assert worker.meridian_receive() == version
        assert all(torch.equal(loaded(worker)[hf.to_hf(k)], v + version) for k, v in state.items())
    worker.meridian_close_sync()
    assert not hasattr(worker, "_meridian_sync")
    Path(out).write_text("ok")


def test_weights_reach_the_worker_extension_over_a_standalone_group(tmp_path: Path) -> None:
    cfg = model_config("tiny", precision="fp32")
    hf.save_hf(snapshot(LanguageModel(cfg)), cfg, tmp_path / "ckpt")
    assert run_ranks(_member, 2, free_port(), str(tmp_path / "ckpt"), str(tmp_path / "ok")) == [0, 0]
    assert (tmp_path / "ok").read_text() == "ok"
