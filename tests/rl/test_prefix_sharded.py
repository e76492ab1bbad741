"""The shared-prompt forward (model/prefix.py) in a sharded trainer group: FSDP2 over gloo, two processes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from trainer.model.transformer import LanguageModel
from trainer.rl.episode import make_batch
from trainer.rl.loss import response_logprobs

from tests.rl.conftest import model_config, run_ranks
from tests.rl.test_prefix import _gradients, _groups, _plain

pytestmark = pytest.mark.live  # the group's two ranks


def _sharded_rank(rank: int, store: str, out: str) -> None:
    """A rank of a group of 2 (FSDP2 per block and at the root): the shared forward calls the model once per
    prompt length and once more per length with longer answers, all before the one backward."""
    from torch import distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    tiny = model_config("tiny", precision="fp32")
    torch.manual_seed(0)
    whole = LanguageModel(tiny)
    torch.manual_seed(0)
    model = LanguageModel(tiny)
    mesh = init_device_mesh("cpu", (2,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    batch = make_batch(_groups())
    expected = _gradients(whole, _plain(whole, batch.tokens, batch.mask, torch.ones(tiny.vocab, dtype=torch.bool)))
    got = response_logprobs(model, batch.tokens, batch.mask)
    weights = torch.arange(1.0, 1.0 + got.numel()).view(got.shape)
    (got * weights).sum().backward()  # type: ignore[no-untyped-call]
    worst = max(
        float((p.grad.full_tensor() - e).abs().max()) / float(e.abs().max())  # type: ignore[union-attr]
        for p, e in zip(model.parameters(), expected, strict=True)
    )
    if rank == 0:
        Path(out).write_text(f"{worst:.3g}")
    dist.destroy_process_group()
    os._exit(0)  # as test_sync_memory's ranks: the sharded module's gloo threads can abort the teardown


def test_a_sharded_group_gets_the_plain_forwards_gradients_from_several_forwards(tmp_path: Path) -> None:
    assert run_ranks(_sharded_rank, 2, str(tmp_path / "store"), str(tmp_path / "worst")) == [0, 0]
    assert float((tmp_path / "worst").read_text()) <= 1e-5  # fp32 rounding at each gradient's scale
