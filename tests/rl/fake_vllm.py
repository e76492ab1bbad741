"""A fake ``vllm`` module for VllmGenerator on CPU: it records what the adapter asks of the engine and answers
in vLLM's shapes (RequestOutput.outputs[i].token_ids / .logprobs as [{token id: Logprob}]). Its workers are
the real worker extension (vllm_worker.MeridianWorker) over a fake model runner, one per tensor-parallel
rank; ``collective_rpc`` runs a method in every worker at once (threads), as vLLM runs it in each worker
process, so collectives among them (a sync group's rendezvous) meet.

Its model's ``load_weights`` does what vLLM's Llama loaders check and keep: an unknown name is a KeyError, a
tensor must have the checkpoint's whole shape (each ``weight_loader`` asserts the narrowed slice fits its
parameter), and each worker keeps only its tensor-parallel slice (``tp_slice``, vllm_worker.py's docstring
cites the loaders), recording the bytes it holds and the most it was handed in one call."""

from __future__ import annotations

import json
import sys
import threading
import types
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from trainer.config import Model
from trainer.rl import hf
from trainer.rl.vllm_worker import MeridianWorker

LOGPROB = -0.123456789012345  # a float64 that float32 rounds: the adapter must hand back the float32 value


@dataclass
class Logprob:
    logprob: float


@dataclass
class Sample:
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] | None


@dataclass
class RequestOutput:
    outputs: list[Sample]


VOCAB_PADDING = 64  # vLLM's DEFAULT_VOCAB_PADDING_SIZE (vocab_parallel_embedding.py): the vocab is padded, then split
COLUMN = ("self_attn.q_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight")  # output dim 0, even parts
KV = ("self_attn.k_proj.weight", "self_attn.v_proj.weight")  # by KV head, replicated when tp exceeds the heads
ROW = ("self_attn.o_proj.weight", "mlp.down_proj.weight")  # input dim 1
VOCAB = ("model.embed_tokens.weight", "lm_head.weight")  # vocab dim 0


def tp_slice(name: str, whole: torch.Tensor, rank: int, tp: int, cfg: Model) -> torch.Tensor:
    """Worker ``rank``'s part of the HF tensor ``name`` at tensor parallel ``tp``, as vLLM's weight loaders cut it."""
    if tp == 1:
        return whole
    if name.endswith(COLUMN):
        part = whole.shape[0] // tp
        return whole.narrow(0, rank * part, part)
    if name.endswith(KV):
        kv_heads, head_dim = cfg.kv_heads or cfg.heads, cfg.d_model // cfg.heads
        if tp >= kv_heads:  # one head per worker, each head on tp // kv_heads workers (tp_rank // replicas)
            return whole.narrow(0, rank // (tp // kv_heads) * head_dim, head_dim)
        part = whole.shape[0] // tp
        return whole.narrow(0, rank * part, part)
    if name.endswith(ROW):
        part = whole.shape[1] // tp
        return whole.narrow(1, rank * part, part)
    if name in VOCAB:
        padded = -(-whole.shape[0] // VOCAB_PADDING) * VOCAB_PADDING
        part = padded // tp
        start = min(rank * part, whole.shape[0])
        return whole.narrow(0, start, min(part, whole.shape[0] - start))
    return whole  # the norms: replicated


class FakeModel:
    def __init__(self, rank: int = 0, tp: int = 1, cfg: Model | None = None) -> None:
        self.rank, self.tp, self.cfg = rank, tp, cfg
        self.loaded: dict[str, torch.Tensor] = {}
        self.largest_call = 0  # bytes handed in one load_weights call

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        if self.tp > 1 and self.cfg is None:
            raise ValueError("the fake vLLM splits for tensor parallel from the folder's config.json: pass a folder")
        handed = 0
        shapes = None if self.cfg is None else {hf.to_hf(k): v for k, v in hf.shapes(self.cfg).items()}
        for name, tensor in weights:
            if hf.from_hf(name) is None or (shapes is not None and name not in shapes):
                raise KeyError(name)  # vLLM: params_dict[name]
            if shapes is not None and tuple(tensor.shape) != shapes[name]:
                raise AssertionError(f"{name}: {tuple(tensor.shape)} is not the checkpoint's {shapes[name]}")
            handed += tensor.numel() * tensor.element_size()
            part = tensor if self.cfg is None else tp_slice(name, tensor, self.rank, self.tp, self.cfg)
            if name in self.loaded:  # vLLM's parameters exist from its start: a load copies into them
                self.loaded[name].copy_(part)
            else:  # the first load makes the fake's parameter: its own memory, never a view of what it was handed
                self.loaded[name] = part.clone()
        self.largest_call = max(self.largest_call, handed)

    @property
    def held(self) -> int:
        """Bytes of weights this worker holds (its slices)."""
        return sum(t.numel() * t.element_size() for t in self.loaded.values())


def fake_worker(rank: int = 0, tp: int = 1, cfg: Model | None = None) -> MeridianWorker:
    worker = MeridianWorker()
    worker.model_runner = types.SimpleNamespace(model=FakeModel(rank, tp, cfg))
    worker.rank, worker.device = rank, torch.device("cpu")
    return worker


def model_of(worker: MeridianWorker) -> FakeModel:
    model: FakeModel = worker.model_runner.model
    return model


def loaded(worker: MeridianWorker) -> dict[str, torch.Tensor]:
    """The HF-named weights the worker's model keeps: its tensor-parallel slices."""
    return model_of(worker).loaded


def folder_config(folder: str) -> Model | None:
    """The model an exported folder holds (None where the folder has no config.json, as "/ckpt" in unit tests)."""
    path = Path(folder) / hf.CONFIG
    return hf.model_config(json.loads(path.read_text()), str(path))[0] if path.is_file() else None


@dataclass
class Engine:
    """What the fake records: the LLM's arguments, every SamplingParams, request and RPC, and its workers
    (one per ``tensor_parallel_size``, made when the LLM is)."""

    llm_args: dict[str, Any] = field(default_factory=dict)
    params: list[dict[str, Any]] = field(default_factory=list)
    requests: list[list[dict[str, list[int]]]] = field(default_factory=list)
    rpcs: list[str] = field(default_factory=list)
    prefix_resets: int = 0
    workers: list[MeridianWorker] = field(default_factory=list)

    @property
    def worker(self) -> MeridianWorker:
        return self.workers[0]

    def rpc(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """``method`` in every worker concurrently; their answers in rank order, or the first failure."""
        self.rpcs.append(method)
        answers: list[Any] = [None] * len(self.workers)
        failures: list[BaseException] = []

        def call(rank: int) -> None:
            try:
                answers[rank] = getattr(self.workers[rank], method)(*args, **kwargs)
            except BaseException as error:  # raised below, in the caller's thread
                failures.append(error)

        threads = [threading.Thread(target=call, args=(rank,)) for rank in range(len(self.workers))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures:
            raise failures[0]
        return answers


def fake_vllm(engine: Engine) -> types.ModuleType:
    class SamplingParams:
        def __init__(self, **kwargs: Any) -> None:
            engine.params.append(kwargs)
            self.kwargs = kwargs

    class LLM:
        def __init__(self, **kwargs: Any) -> None:
            engine.llm_args = kwargs
            tp = int(kwargs.get("tensor_parallel_size", 1))
            cfg = folder_config(str(kwargs["model"]))
            engine.workers = [fake_worker(rank, tp, cfg) for rank in range(tp)]
            parallel = types.SimpleNamespace(world_size=tp)
            self.llm_engine = types.SimpleNamespace(vllm_config=types.SimpleNamespace(parallel_config=parallel))

        def generate(self, requests: list[dict[str, list[int]]], params: SamplingParams, use_tqdm: bool) -> Any:
            engine.requests.append(requests)
            n, allowed = params.kwargs["n"], params.kwargs["allowed_token_ids"] or [7]
            outputs = []
            for r in range(len(requests)):
                samples = []
                for k in range(n):  # sample k of prompt r: k + 1 tokens drawn from the allowed ids
                    tokens = [allowed[(r + k + j) % len(allowed)] for j in range(k + 1)]
                    samples.append(Sample(tokens, [{t: Logprob(LOGPROB * (j + 1))} for j, t in enumerate(tokens)]))
                outputs.append(RequestOutput(samples))
            return outputs

        def collective_rpc(
            self, method: str, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
        ) -> list[Any]:
            return engine.rpc(method, args, kwargs or {})

        def reset_prefix_cache(self) -> None:
            engine.prefix_resets += 1

    module = types.ModuleType("vllm")
    module.LLM, module.SamplingParams = LLM, SamplingParams  # type: ignore[attr-defined]
    return module


def install(monkeypatch: pytest.MonkeyPatch) -> Engine:
    """Put a fresh fake in place of ``vllm`` for one test; returns what it records."""
    recorded = Engine()
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm(recorded))
    return recorded
