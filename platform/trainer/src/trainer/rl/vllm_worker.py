"""The worker extension vLLM mixes into each of its GPU workers: how the trainer's weights get into the engine.

vLLM loads it by dotted name, ``LLM(worker_extension_cls=EXTENSION)``, and its methods run in every
worker through ``LLM.collective_rpc(name, args=...)`` (the pattern of vLLM's examples/offline_inference/
rlhf_utils.py; https://docs.vllm.ai/en/latest/training/weight_transfer/). This module imports no vllm:
the attributes it uses (``model_runner``, ``rank``, ``device``) are the worker's own.

Two paths, both ending in the model's ``load_weights`` with HF names:

- ``meridian_load``: tensors passed through the RPC (pickled across vLLM's process boundary): for tests
  and small models;
- ``meridian_open_sync`` then ``meridian_receive`` per version: ``WeightSync`` (per bucket a header and one
  flat buffer) broadcast from the trainer over NCCL, through a standalone group (``weight_sync.open_group``)
  whose TCP store the trainer hosts (``trainer_group``), or, in the distributed run, a pair over the
  controller's store (``prefix`` = the pair's, pairs.py; engines.py): vLLM's workers already belong to
  vLLM's own default group, so they cannot join the trainer's registered one.

What a tensor-parallel worker holds: its own slice of the weights, plus one bucket while a version arrives.
Every worker receives every bucket (a broadcast) and hands it to ``load_weights`` before the next, and vLLM's
loaders keep the worker's slice: ``LlamaForCausalLM.load_weights`` maps q/k/v into ``qkv_proj`` and gate/up
into ``gate_up_proj`` (``stacked_params_mapping``, vllm/model_executor/models/llama.py), and each parameter's
``weight_loader`` narrows the whole tensor to its rank's part (vllm/model_executor/layers/linear.py: column-
parallel q/k/v/gate/up on the output dim 0, k/v by KV head with heads replicated when tensor parallel exceeds
them, ``tp_rank // num_kv_head_replicas``; row-parallel o/down on the input dim 1;
vllm/model_executor/layers/vocab_parallel_embedding.py: embeddings and lm_head on the vocab dim 0). vLLM's
RLHF example loads one tensor per call the same way (examples/offline_inference/rlhf_utils.py). Sending each
worker its slice instead would halve the bytes each GPU receives at TP2, but the trainer would have to repeat
those rules (and their padding of the vocab) and vLLM's loaders would have to take pre-cut tensors; receiving
whole buckets keeps the slicing where vLLM defines it, at a bounded cost in memory (one bucket), and the cost
in wire time is in the README's cost model. tests/rl/fake_vllm.py cuts the same slices and checks the shapes
vLLM's loaders would.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch._C._distributed_c10d import Backend

from trainer.rl import hf
from trainer.rl.weight_sync import BUCKET_MB, WeightSync, close_group, open_group

EXTENSION = "trainer.rl.vllm_worker.MeridianWorker"
PREFIX = "meridian-weights"  # the sync group's keys in the trainer's store
TIMEOUT_S = 600.0  # how long the rendezvous and each broadcast wait for the other side


def to_hf_named(state: Mapping[str, torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
    """(HF name, tensor) pairs for the trainer's parameter names; one line for a name outside the map."""
    out = []
    for name, tensor in state.items():
        try:
            out.append((hf.to_hf(name), tensor))
        except KeyError:
            raise ValueError(f"{name!r} is not a parameter of the trainer's Llama family (hf.py's map)") from None
    return out


def template(folder: str | Path, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Meta tensors with the trainer's names and shapes for the exported checkpoint's config.json: the sync layout."""
    path = Path(folder) / hf.CONFIG
    cfg, _ = hf.model_config(json.loads(path.read_text(encoding="utf-8")), str(path))
    return {name: torch.empty(shape, dtype=dtype, device="meta") for name, shape in hf.shapes(cfg).items()}


def trainer_group(host: str, port: int, world: int, *, backend: str = "nccl", timeout_s: float = TIMEOUT_S) -> Backend:
    """The trainer's side of ``meridian_open_sync``: rank 0, hosting the store on ``port`` of this host.

    Blocks until all ``world`` members (the trainer and every vLLM worker) have joined.
    """
    return open_group(host, port, 0, world, backend=backend, timeout_s=timeout_s, prefix=PREFIX, host_store=True)


def worker_group(
    host: str,
    port: int,
    rank: int,
    world: int,
    *,
    backend: str = "nccl",
    prefix: str = PREFIX,
    timeout_s: float = TIMEOUT_S,
) -> Backend:
    """A receiver's side: rank ``rank`` (1..world-1), joining a store served elsewhere (the trainer's by
    ``trainer_group``, or the controller's for a pair)."""
    return open_group(host, port, rank, world, backend=backend, timeout_s=timeout_s, prefix=prefix, host_store=False)


class MeridianWorker:
    """Mixed into vLLM's worker class; every method runs once in each tensor-parallel worker."""

    model_runner: Any  # the worker's: .model is the vLLM model with load_weights(Iterable[(hf_name, tensor)])
    rank: int  # the worker's rank in vLLM's world (0..tensor_parallel_size-1 on one engine)
    device: torch.device
    _meridian_sync: tuple[WeightSync, Backend]  # set by meridian_open_sync

    def _load(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        self.model_runner.model.load_weights(weights=weights)

    def meridian_load(self, weights: list[tuple[str, torch.Tensor]]) -> int:
        """Load HF-named tensors handed through the RPC; returns how many."""
        self._load(weights)
        return len(weights)

    def meridian_open_sync(
        self,
        host: str,
        port: int,
        world: int,
        folder: str,
        dtype: str,
        *,
        rank_offset: int = 1,
        backend: str = "nccl",
        prefix: str = PREFIX,
        timeout_s: float = TIMEOUT_S,
        bucket_bytes: int = BUCKET_MB << 20,
    ) -> int:
        """Join a sync group as rank ``rank_offset + rank``; returns that rank. ``dtype``, ``bucket_bytes``: the
        wire's (the sender's).

        The sender (rank 0) must join with the same host, port, world and prefix at the same time (the
        trainer's ``trainer_group``, or a pair's sender, pairs.pair_group): the group meets once all are in.
        """
        rank = rank_offset + self.rank
        self.meridian_close_sync()  # a new sender's group: the previous one is done with
        group = worker_group(host, port, rank, world, backend=backend, prefix=prefix, timeout_s=timeout_s)
        torch_dtype = getattr(torch, dtype)
        device = getattr(self, "device", torch.device("cpu"))
        layout = template(folder, torch_dtype)
        sync = WeightSync(layout, src=0, dtype=torch_dtype, device=device, bucket_bytes=bucket_bytes)
        self._meridian_sync = (sync, group)
        return rank

    def meridian_close_sync(self) -> None:
        """Close this worker's sync group, if it has one (weight_sync.close_group: before the process exits)."""
        held = getattr(self, "_meridian_sync", None)
        if held is not None:
            close_group(held[1])
            del self._meridian_sync

    def meridian_receive(self) -> int:
        """Receive one version from the trainer, loading each bucket as it arrives; returns the version."""
        sync, group = self._meridian_sync
        return sync.receive(lambda bucket: self._load(to_hf_named(bucket)), group=group)
