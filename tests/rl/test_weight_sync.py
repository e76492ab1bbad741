"""Weight sync over gloo: after each version, every generator holds the trainer's snapshot bit for bit,
stamped with that version, through one reused buffer; between processes over a registered group, and
over pairs.py's standalone two-member groups in a store someone else hosts (the controller)."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import replace
from typing import Any

import pytest
import torch
import torch.distributed as dist
from trainer.config import Model
from trainer.model.transformer import LanguageModel
from trainer.rl.generate import snapshot
from trainer.rl.pairs import WeightReceiver, WeightServer, pair_group
from trainer.rl.service import Client
from trainer.rl.weight_sync import BUCKET_MB, LayoutError, WeightSync, close_group, layout

from tests.threads import gloo_threads
from tests.waiting import until

VERSIONS = 3


def digest(state: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode())
        h.update(state[name].detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def test_the_layout_is_the_models_names_and_shapes_in_buckets_of_whole_tensors(tiny: Model) -> None:
    a = LanguageModel(tiny).state_dict()
    buckets, digest_a = layout(a)
    assert len(buckets) == 1  # 0.5 MB: one bucket at the default size
    assert [s.name for s in buckets[0].slots] == sorted(a)
    assert buckets[0].numel == sum(t.numel() for t in a.values())
    wider = LanguageModel(replace(tiny, d_model=128)).state_dict()
    assert layout(wider)[1] != digest_a
    assert layout(a, torch.bfloat16)[1] != digest_a  # the same tensors cast for the wire are another layout
    small, digest_small = layout(a, torch.float32, 20_000)
    assert digest_small != digest_a  # another bucket size is another layout: the sides must cut the same buckets
    assert [s.name for b in small for s in b.slots] == sorted(a)  # every tensor once, whole, in order
    for bucket in small:
        ends = [s.start + s.numel for s in bucket.slots]
        assert [s.start for s in bucket.slots] == [0, *ends[:-1]]
        assert ends[-1] == bucket.numel
        assert bucket.numel * 4 <= 20_000 or len(bucket.slots) == 1  # only a tensor larger than a bucket is alone


def test_a_state_of_another_model_is_refused_before_anything_is_sent(tiny: Model) -> None:
    model = LanguageModel(tiny)
    sync = WeightSync(model.state_dict(), src=0)
    state = snapshot(model)
    state.pop("head.weight")
    with pytest.raises(LayoutError, match=r"names differ .*missing \['head\.weight'\]"):
        sync.send(state, 1)
    with pytest.raises(LayoutError, match="snapshot's buckets are not this sync's layout"):
        sync.send(WeightSync(state, src=0, bucket_bytes=4096).snapshot(state), 1)
    assert not dist.is_initialized()  # refused before any collective


def test_a_snapshot_is_the_model_cast_bucket_by_bucket_and_the_header_refuses_another_layout(tiny: Model) -> None:
    torch.manual_seed(1)
    state = snapshot(LanguageModel(tiny))
    sender = WeightSync(state, src=0, dtype=torch.bfloat16, bucket_bytes=40_000)
    taken = sender.snapshot(state)
    assert [t.numel() for t in taken.buckets] == [b.numel for b in sender.buckets]
    assert all(t.dtype == torch.bfloat16 for t in taken.buckets)
    assert taken.gathered_bytes == 0  # nothing sharded, nothing gathered
    for index, flat in enumerate(taken.buckets):
        views = sender.views(index, flat)
        assert all(torch.equal(v, state[k].to(torch.bfloat16)) for k, v in views.items())
        assert torch.equal(sender.pack(index, state), flat)  # the other way to send: cast into the one buffer
    assert sender.buffer_bytes == 2 * max(b.numel for b in sender.buckets)  # one bucket, not the model
    assert sender.snapshot(state, keep=False).buckets == []  # a sharded group's other ranks keep nothing
    receiver = WeightSync(state, src=0, dtype=torch.bfloat16, bucket_bytes=40_000)
    receiver.header.copy_(torch.tensor([5, 1, sender.buckets[1].numel, sender.digest]))  # bucket 1's header
    assert receiver.check(1, 5) == 5
    with pytest.raises(LayoutError, match="is not this member's bucket 0"):
        receiver.check(0, None)  # out of turn
    with pytest.raises(LayoutError, match="version 5"):
        receiver.check(1, 4)  # another version than the first bucket's
    wider_model = LanguageModel(replace(tiny, d_model=128)).state_dict()
    wider = WeightSync(wider_model, src=0, dtype=torch.bfloat16, bucket_bytes=40_000)
    wider.header.copy_(receiver.header)
    with pytest.raises(LayoutError, match="version 5: the sender's bucket 1") as error:
        wider.check(1, None)
    assert "\n" not in str(error.value)


def test_a_pair_meets_in_a_store_hosted_elsewhere_and_carries_each_version(tiny: Model, store: Any) -> None:
    """pairs.pair_group: the controller hosts the store; the trainer's sender (rank 0) and a generator
    (rank 1) each join it, in threads here, processes in a run."""
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
    got: dict[str, torch.Tensor] = {}
    for version in (1, 2):
        got.clear()
        assert receiver.receive(lambda bucket: got.update({k: v.clone() for k, v in bucket.items()}), group) == version
        assert all(torch.equal(got[k], state[k] * version) for k in state)
    sender.join(timeout=60)
    assert failures == []
    assert not dist.is_initialized()  # a standalone group: no default world
    close_group(group)


def test_both_sides_of_a_pair_close_it_and_leave_no_backend_thread_to_the_exit(tiny: Model, store: Any) -> None:
    """CI, stop 50: a process still holding a group when it exits aborts while Python finalizes ("terminate called
    without an active exception"; 12 of 60 processes here): the weight server's stop and the receiver's close
    end every pair's group, its threads gone, while the process runs."""
    torch.manual_seed(3)
    state = snapshot(LanguageModel(tiny))
    cpu = torch.device("cpu")
    before = gloo_threads()
    sync = WeightSync(state, src=0)
    server = WeightServer(
        Client("http://127.0.0.1:1"), 0, "t0", sync, store_port=store.port, timeout_s=60.0, device=cpu
    )
    server.offer(1, sync.snapshot(state))
    sending = threading.Thread(target=server._send, args=("0.t0.g.1", 2))
    sending.start()
    receiver = WeightReceiver(state, host="127.0.0.1", timeout_s=60.0, device=cpu, bucket_bytes=BUCKET_MB << 20)
    assert receiver.receive("0.t0.g.1", store.port, lambda bucket: None) == 1
    sending.join(timeout=60)
    assert server.sent == 1
    until(
        lambda: gloo_threads() > before, 30, "the pair's worker threads"
    )  # the two groups, kept for the next versions
    server.stop()
    receiver.close()
    assert gloo_threads() == before
