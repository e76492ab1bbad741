"""Weight sync over gloo: after each version, every generator holds the trainer's snapshot bit for bit,
stamped with that version, through one reused buffer; between processes over a registered group, and
over pairs.py's standalone two-member groups in a store someone else hosts (the controller)."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import replace
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from trainer.config import Model
from trainer.model.transformer import LanguageModel
from trainer.rl.generate import snapshot
from trainer.rl.pairs import pair_group
from trainer.rl.weight_sync import LayoutError, WeightSync, layout

VERSIONS = 3


def digest(state: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode())
        h.update(state[name].detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def test_the_layout_is_the_models_names_and_shapes(tiny: Model) -> None:
    a = LanguageModel(tiny).state_dict()
    slots, digest_a = layout(a)
    assert [s.name for s in slots] == sorted(a)
    assert sum(s.numel for s in slots) == sum(t.numel() for t in a.values())
    wider = LanguageModel(replace(tiny, d_model=128)).state_dict()
    assert layout(wider)[1] != digest_a
    assert layout(a, torch.bfloat16)[1] != digest_a  # the same tensors cast for the wire are another layout


def test_a_state_of_another_model_is_refused_before_anything_is_sent(tiny: Model) -> None:
    model = LanguageModel(tiny)
    sync = WeightSync(model.state_dict(), src=0)
    state = snapshot(model)
    state.pop("head.weight")
    with pytest.raises(LayoutError, match=r"names differ .*missing \['head\.weight'\]"):
        sync.send(state, 1)
    assert not dist.is_initialized()  # refused before any collective


def test_pack_unpack_is_bit_exact_and_the_header_refuses_another_layout(tiny: Model) -> None:
    torch.manual_seed(1)
    state = snapshot(LanguageModel(tiny))
    sender, receiver = WeightSync(state, src=0), WeightSync(state, src=0)
    sender.pack(state, 5)
    receiver.header.copy_(sender.header)  # what the two broadcasts carry
    receiver.buffer.copy_(sender.buffer)
    assert receiver.check() == 5
    back = receiver.unpack()
    assert set(back) == set(state)
    assert all(torch.equal(back[k].view(torch.int32), state[k].view(torch.int32)) for k in state)  # bit for bit
    assert all(back[s.name].data_ptr() == receiver.buffer[s.start :].data_ptr() for s in receiver.slots)  # views
    wider = WeightSync(LanguageModel(replace(tiny, d_model=128)).state_dict(), src=0)
    wider.header.copy_(sender.header)
    with pytest.raises(LayoutError, match="version 5: the sender's layout") as error:
        wider.check()
    assert "\n" not in str(error.value)
    cast = WeightSync(state, src=0, dtype=torch.bfloat16)  # another wire dtype: the same elements, cast
    cast.pack(state, 6)
    assert all(torch.equal(cast.unpack()[k], state[k].to(torch.bfloat16)) for k in state)


def test_a_pair_meets_in_a_store_hosted_elsewhere_and_carries_each_version(tiny: Model) -> None:
    """pairs.pair_group: the controller hosts the store; the trainer's sender (rank 0) and a generator
    (rank 1) each join it, in threads here, processes in a run."""
    timeout = timedelta(seconds=60)
    store = dist.TCPStore(  # type: ignore[attr-defined]
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timeout
    )
    torch.manual_seed(2)
    state = snapshot(LanguageModel(tiny))
    cpu = torch.device("cpu")
    failures: list[BaseException] = []

    def send() -> None:
        try:
            group = pair_group("127.0.0.1", store.port, "g0-a", 0, 60.0, cpu, world=2)
            sync = WeightSync(state, src=0)
            for version in (1, 2):
                sync.send({k: v * version for k, v in state.items()}, version, group=group)
        except BaseException as error:  # surfaced below, not lost in the thread
            failures.append(error)

    sender = threading.Thread(target=send)
    sender.start()
    group = pair_group("127.0.0.1", store.port, "g0-a", 1, 60.0, cpu, world=2)
    receiver = WeightSync(state, src=0)
    for version in (1, 2):
        got_version, got = receiver.receive(group=group)
        assert got_version == version
        assert all(torch.equal(got[k], state[k] * version) for k in state)
    sender.join(timeout=60)
    assert failures == []
    assert not dist.is_initialized()  # a standalone group: no default world
