"""A generator process's engine (``rl.engine``) and the receiver that gets the trainer's weights into it.

generator_main asks ``build`` for both and never looks at which engine it got: the one place that
chooses is here. A receiver knows how many of its processes take part in a pair (``members``: the
controller sizes the pair 1 + members, the sender is rank 0), the version it got from the trainer
(``held``, -1 before the first), and how to receive one over the pair the controller names.

- torch: ``TorchGenerator`` in this process, one member (pairs.WeightReceiver);
- vllm: ``VllmGenerator``, whose tensor-parallel workers are the members (ranks 1..TP, each receiving every
  bucket and keeping its own tensor-parallel slice, vllm_worker.MeridianWorker). The engine starts from an exported folder (its architecture
  and shapes matter, not its values) and reports -1 until the trainer's first version arrives, so the
  controller never leases it prompts for weights the trainer did not send.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from contract import names
from trainer.config import Config
from trainer.model.transformer import LanguageModel
from trainer.rl import hf
from trainer.rl.generate import Generator, TorchGenerator, snapshot
from trainer.rl.pairs import WeightReceiver, backend_for, prefix, wire
from trainer.rl.ray_generators import tensor_parallel
from trainer.rl.vllm_engine import VllmGenerator


class Receiver(Protocol):
    @property
    def members(self) -> int:
        """The processes that receive the weights: the pair is 1 + this."""
        ...

    @property
    def held(self) -> int:
        """The policy version received from the trainer and held now; -1 before the first."""
        ...

    def receive(self, pair: str, store_port: int) -> int:
        """Receive the version sent over ``pair`` (met in the controller's store) into the engine; returns it.

        Raises when the sender fails: the generator reports it and the controller names another pair."""
        ...

    def close(self) -> None:
        """Close the pair's group in every receiving process before the generator exits (weight_sync.close_group)."""
        ...


class TorchReceiver:
    members = 1

    def __init__(
        self, engine: TorchGenerator, *, host: str, timeout_s: float, device: torch.device, bucket_bytes: int
    ) -> None:
        self.engine = engine
        self.pairs = WeightReceiver(
            engine.model.state_dict(), host=host, timeout_s=timeout_s, device=device, bucket_bytes=bucket_bytes
        )

    @property
    def held(self) -> int:
        return self.engine.version

    def receive(self, pair: str, store_port: int) -> int:
        version = self.pairs.receive(pair, store_port, self.engine.load_part)  # each bucket into the engine
        self.engine.loaded(version)
        return version

    def close(self) -> None:
        self.pairs.close()


class VllmReceiver:
    def __init__(
        self, engine: VllmGenerator, *, host: str, timeout_s: float, device: torch.device, bucket_bytes: int
    ) -> None:
        self.engine, self.host, self.timeout_s, self.bucket_bytes = engine, host, timeout_s, bucket_bytes
        self.backend, self.wire = backend_for(device), str(wire(device)).removeprefix("torch.")
        self.members = engine.workers
        self.pair: str | None = None  # the pair the workers' group belongs to
        self.received = False

    @property
    def held(self) -> int:
        return self.engine.version if self.received else -1

    def receive(self, pair: str, store_port: int) -> int:
        try:
            if self.pair != pair:
                self.pair = None
                self.engine.open_sync(
                    self.host, store_port, backend=self.backend, prefix=prefix(pair),
                    wire_dtype=self.wire, timeout_s=self.timeout_s, bucket_bytes=self.bucket_bytes,
                )  # fmt: skip
                self.pair = pair
            version = self.engine.receive()
        except Exception:
            self.pair = None  # half set up, or the sender died: a fresh group with the next pair
            self.received = False  # some buckets may be in: the engine holds no whole version until the next
            raise
        self.received = True
        return version

    def close(self) -> None:
        self.engine.close_sync()
        self.pair = None


@dataclass(frozen=True)
class Engine:
    generator: Generator
    receiver: Receiver


def start_folder(cfg: Config, scratch: Path | None) -> Path:
    """What vLLM starts from: rl.hf_checkpoint when it is a local folder, else the seeded init exported to
    ``scratch`` (bf16: vLLM's dtype). Only its config and shapes matter: the first sync overwrites the values."""
    given = cfg.rl.hf_checkpoint
    if given and "://" not in given and Path(given).is_dir():
        return Path(given)
    if scratch is None:
        raise ValueError("the vLLM engine starts from a folder: give it a scratch folder (generator_main.scratch_for)")
    torch.manual_seed(cfg.run.seed)
    folder = scratch / "start"
    hf.save_hf(snapshot(LanguageModel(cfg.model)), cfg.model, folder, dtype=torch.bfloat16)
    return folder


def build(
    cfg: Config, *, seed: int, host: str, scratch: Path | None, environ: Mapping[str, str] = os.environ
) -> Engine:
    """The engine ``cfg.rl.engine`` names, with its receiver; ``scratch`` (vLLM's only) lives as long as the engine."""
    device = torch.device("cuda" if cfg.ft.device == "cuda" else "cpu")
    timeout_s, bucket_bytes = cfg.rl.sync_timeout_s, cfg.rl.sync_bucket_mb << 20
    if cfg.rl.engine == names.VLLM_ENGINE:
        engine = VllmGenerator(
            start_folder(cfg, scratch), version=0, tensor_parallel_size=tensor_parallel(environ),
            gpu_memory_utilization=cfg.rl.gpu_memory_utilization, seed=seed,
        )  # fmt: skip
        receiver = VllmReceiver(engine, host=host, timeout_s=timeout_s, device=device, bucket_bytes=bucket_bytes)
        return Engine(engine, receiver)
    torch_engine = TorchGenerator(cfg.model, seed=seed, device=device)
    torch_receiver = TorchReceiver(
        torch_engine, host=host, timeout_s=timeout_s, device=device, bucket_bytes=bucket_bytes
    )
    return Engine(torch_engine, torch_receiver)
