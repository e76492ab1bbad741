"""The trainer's weights reach every generator over a gloo group of processes, bit for bit at each version (the
layout and the packing, pure: test_weight_sync.py; live: the test starts the group's processes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from trainer.model.transformer import LanguageModel
from trainer.rl.generate import TorchGenerator, snapshot
from trainer.rl.weight_sync import WeightSync

from tests.rl.conftest import model_config, run_ranks
from tests.rl.test_weight_sync import VERSIONS, digest

pytestmark = pytest.mark.live  # the group's processes
BUCKET = 64 << 10  # below the model's 0.5 MB: several buckets per version


def _member(rank: int, world: int, store: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    torch.manual_seed(0)
    cfg = model_config("tiny", precision="fp32")
    record: list[dict[str, object]] = []
    if rank == 0:  # the trainer's sending rank: a "step" changes the weights, then a snapshot is sent
        model = LanguageModel(cfg)
        sync = WeightSync(model.state_dict(), src=0, bucket_bytes=BUCKET)
        for version in range(1, VERSIONS + 1):
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(torch.randn_like(p) * 0.01)
            sent = snapshot(model)
            sync.send(sync.snapshot(sent), version)
            with torch.no_grad():  # the optimizer writing after the send changes nothing already received
                for p in model.parameters():
                    p.mul_(2.0)
            record.append({"version": version, "digest": digest(sent)})
    else:
        generator = TorchGenerator(cfg, seed=rank, device="cpu")
        sync = WeightSync(generator.model.state_dict(), src=0, bucket_bytes=BUCKET)
        for _ in range(VERSIONS):
            generator.loaded(sync.receive(generator.load_part))
            record.append({
                "version": generator.version,
                "digest": digest(generator.model.state_dict()),
                "buffer": sync.buffer.data_ptr(),
            })  # fmt: skip
    Path(out, f"{rank}.json").write_text(json.dumps(record))
    dist.destroy_process_group()


def test_generators_hold_the_trainers_snapshot_bit_for_bit_at_each_version(tmp_path: Path) -> None:
    world = 3  # the trainer's rank and two generators
    assert run_ranks(_member, world, world, str(tmp_path / "store"), str(tmp_path), timeout_s=240) == [0] * world
    trainer = json.loads((tmp_path / "0.json").read_text())
    assert [r["version"] for r in trainer] == [1, 2, 3]
    for rank in (1, 2):
        got = json.loads((tmp_path / f"{rank}.json").read_text())
        assert [r["version"] for r in got] == [1, 2, 3]
        assert [r["digest"] for r in got] == [r["digest"] for r in trainer]
        assert len({r["buffer"] for r in got}) == 1  # one buffer, reused for every version
    assert len({r["digest"] for r in trainer}) == VERSIONS  # each version really differs
