"""A fake ``vllm`` module for VllmGenerator on CPU: it records what the adapter asks of the engine and answers
in vLLM's shapes (RequestOutput.outputs[i].token_ids / .logprobs as [{token id: Logprob}]). Its workers are
the real worker extension (vllm_worker.MeridianWorker) over a fake model runner, one per tensor-parallel
rank; ``collective_rpc`` runs a method in every worker at once (threads), as vLLM runs it in each worker
process, so collectives among them (a sync group's rendezvous) meet."""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
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


class FakeModel:
    def __init__(self) -> None:
        self.loaded: dict[str, torch.Tensor] = {}

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        self.loaded |= {name: tensor.clone() for name, tensor in weights}


def fake_worker(rank: int = 0) -> MeridianWorker:
    worker = MeridianWorker()
    worker.model_runner = types.SimpleNamespace(model=FakeModel())
    worker.rank, worker.device = rank, torch.device("cpu")
    return worker


def loaded(worker: MeridianWorker) -> dict[str, torch.Tensor]:
    """The HF-named weights the worker's model was handed."""
    model: FakeModel = worker.model_runner.model
    return model.loaded


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
            engine.workers = [fake_worker(rank) for rank in range(tp)]
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
