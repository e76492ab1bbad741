"""rl.engine=vllm in the distributed run, on CPU: the fake vllm (fake_vllm.py) drives the real worker extension,
whose tensor-parallel workers join a pair with the trainer's real sender (pairs.WeightServer) over a TCP
store the test hosts, as the controller does; the generator process's loop is driven by scripted answers."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from trainer.config import compose
from trainer.model.transformer import LanguageModel
from trainer.rl import generator_main, hf
from trainer.rl.engines import VllmReceiver
from trainer.rl.generate import snapshot
from trainer.rl.pairs import WeightServer
from trainer.rl.service import Client
from trainer.rl.vllm_engine import VllmGenerator
from trainer.rl.weight_sync import BUCKET_MB, WeightSync

from contract.names import TENSOR_PARALLEL_ENV
from tests.conftest import REPO
from tests.rl.conftest import model_config
from tests.rl.fake_vllm import Engine, loaded, model_of, tp_slice

GRPO = REPO / "platform/trainer/configs/grpo.yaml"


def weights(seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    return snapshot(LanguageModel(model_config("tiny", precision="fp32")))


def sender(
    port: int, pair: str, world: int, versions: dict[int, dict[str, torch.Tensor]], bucket_bytes: int = BUCKET_MB << 20
) -> Callable[[], None]:
    """The trainer group's side, in a thread: WeightServer sends each version's snapshot over the pair of ``world``."""
    sync = WeightSync(next(iter(versions.values())), src=0, bucket_bytes=bucket_bytes)
    server = WeightServer(
        Client("http://127.0.0.1:1"), 0, "t0", sync, store_port=port, timeout_s=60.0, device=torch.device("cpu")
    )
    failures: list[BaseException] = []

    def send() -> None:
        try:
            for version, state in versions.items():
                server.offer(version, sync.snapshot(state))
                server._send(pair, world)
            assert server.sent == len(versions), "a transfer failed (WeightServer logged it)"
            server.stop()  # its pairs closed, as a trainer group's at the end of a run
        except BaseException as error:  # surfaced by join, not lost in the thread
            failures.append(error)

    thread = threading.Thread(target=send)
    thread.start()

    def join() -> None:
        thread.join(timeout=60)
        assert not thread.is_alive()
        assert failures == []

    return join


def holds(engine: Engine, state: dict[str, torch.Tensor]) -> bool:
    """Every worker of the engine holds its tensor-parallel slice of ``state`` (HF names), bit for bit."""
    cfg, tp = model_config("tiny", precision="fp32"), len(engine.workers)
    return all(
        set(loaded(w)) == {hf.to_hf(k) for k in state}
        and all(
            torch.equal(loaded(w)[hf.to_hf(k)], tp_slice(hf.to_hf(k), v, w.rank, tp, cfg)) for k, v in state.items()
        )
        for w in engine.workers
    )


@pytest.mark.parametrize("tp", [1, 2])
def test_every_tensor_parallel_worker_receives_the_senders_weights_bit_for_bit(
    engine: Engine, store: Any, tmp_path: Path, tp: int
) -> None:
    hf.save_hf(weights(0), model_config("tiny", precision="fp32"), tmp_path, dtype=torch.bfloat16)
    generator = VllmGenerator(tmp_path, version=0, tensor_parallel_size=tp)
    receiver = VllmReceiver(
        generator, host="127.0.0.1", timeout_s=60.0, device=torch.device("cpu"), bucket_bytes=BUCKET_MB << 20
    )
    assert (receiver.members, receiver.held) == (tp, -1)  # the exported folder's weights were never sent
    versions = {3: weights(1), 4: weights(2)}
    join = sender(store.port, "0.t0.g.1", 1 + tp, versions)
    for version, state in versions.items():
        assert receiver.receive("0.t0.g.1", store.port) == version
        assert (receiver.held, generator.version) == (version, version)
        assert holds(engine, state)
    join()
    assert engine.rpcs == ["meridian_open_sync", "meridian_receive", "meridian_receive"]  # the pair is kept
    receiver.close()
    assert engine.rpcs[-1] == "meridian_close_sync"
    assert not any(hasattr(w, "_meridian_sync") for w in engine.workers)
    assert engine.prefix_resets == 2
    assert not dist.is_initialized()


def test_a_worker_holds_its_slice_and_at_most_one_bucket_beyond_it(engine: Engine, store: Any, tmp_path: Path) -> None:
    """The accounting: with buckets smaller than the model, each of two tensor-parallel workers allocates one
    bucket-sized receive buffer, is handed at most one bucket per load, and keeps only its slice."""
    cfg = model_config("tiny", precision="fp32")
    hf.save_hf(weights(0), cfg, tmp_path)
    bucket = 32 << 10  # below the embedding (64 KiB at fp32): that one travels alone, the rest share buckets
    generator = VllmGenerator(tmp_path, version=0, tensor_parallel_size=2)
    receiver = VllmReceiver(
        generator, host="127.0.0.1", timeout_s=60.0, device=torch.device("cpu"), bucket_bytes=bucket
    )
    state = weights(1)
    join = sender(store.port, "0.t0.g.2", 3, {1: state}, bucket_bytes=bucket)
    assert receiver.receive("0.t0.g.2", store.port) == 1
    join()
    assert holds(engine, state)
    whole = sum(t.numel() * t.element_size() for t in state.values())
    largest_tensor = max(t.numel() * t.element_size() for t in state.values())
    bound = max(bucket, largest_tensor)  # a tensor larger than a bucket travels alone
    for worker in engine.workers:
        sync, _ = worker._meridian_sync
        assert len(sync.buckets) >= 10  # the model really went in many buckets
        assert sync.buffer_bytes <= bound  # the one receive buffer, reused for every bucket
        assert model_of(worker).largest_call <= bound  # what one load_weights call was handed
        slices = sum(tp_slice(hf.to_hf(k), v, worker.rank, 2, cfg).numel() * v.element_size() for k, v in state.items())
        assert model_of(worker).held == slices < 0.52 * whole  # its slice: half, and the replicated norms
    assert sum(model_of(w).held for w in engine.workers) >= whole  # together the whole model (norms twice)


class Controller:
    """Scripted answers to the generator's requests, and what it sent."""

    def __init__(self, answers: list[dict[str, Any]]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, dict[str, Any]]] = []

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.asked.append((path, body))
        return {"kept": 1} if path == "/result" else self.answers.pop(0)


def test_a_vllm_generator_asks_for_its_workers_and_holds_nothing_before_the_first_sync(
    engine: Engine, store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TENSOR_PARALLEL_ENV, "2")
    cfg = compose(GRPO, ["run.name=x", "rl.engine=vllm", "rl.controller=http://127.0.0.1:9", "rl.group_size=2",
                         "rl.gpu_memory_utilization=0.5"])  # fmt: skip
    state = weights(5)
    sync: dict[str, Any] = {"pair": "0.t0.generator-0.0.1", "group": 0, "version": 7, "world": 3}
    controller = Controller([
        {"wait": 0.0, "store": store.port},
        {"sync": sync, "store": store.port},
        {"lease": 1, "prompts": [[4, [49, 43, 50, 61]]], "store": store.port},
        {"done": True},
    ])  # fmt: skip
    monkeypatch.setattr(Client, "post", lambda client, path, body: controller.post(path, body))
    join = sender(store.port, sync["pair"], 3, {7: state})
    assert generator_main.run(cfg, 0, 0) == 0
    join()
    assert engine.rpcs[-1] == "meridian_close_sync"  # the generator closed its pair's group before it returned
    leases = [body for path, body in controller.asked if path == "/lease"]
    assert [(b["held"], b["members"], b["sync_failed"]) for b in leases] == [(-1, 2, False), (-1, 2, False),
                                                                             (7, 2, False), (7, 2, False)]  # fmt: skip
    assert holds(engine, state)
    assert (engine.llm_args["tensor_parallel_size"], engine.llm_args["gpu_memory_utilization"]) == (2, 0.5)
    [(_, result)] = [(p, b) for p, b in controller.asked if p == "/result"]
    [group] = result["groups"]
    assert group["index"] == 4
    assert [c["version"] for c in group["completions"]] == [7, 7]  # sampled with the weights it was sent
    assert engine.requests == [[{"prompt_token_ids": [49, 43, 50, 61]}]]


def test_only_the_vllm_engine_gets_a_scratch_folder_and_it_is_removed_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A killed generator never removes its temporary folder: the torch engine, which needs none, makes none."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with generator_main.scratch_for(compose(GRPO, ["run.name=x"])) as scratch:
        assert scratch is None
    with generator_main.scratch_for(compose(GRPO, ["run.name=x", "rl.engine=vllm"])) as scratch:
        assert scratch is not None
        assert Path(scratch).parent == tmp_path
        assert Path(scratch).name.startswith("meridian-generator-")
    assert list(tmp_path.iterdir()) == []
