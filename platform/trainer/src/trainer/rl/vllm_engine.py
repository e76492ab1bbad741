"""vLLM as a ``Generator``: the same interface as TorchGenerator, for GPU generation at 1B-70B.

vllm is imported inside the constructor: it lives only in the generator image
(platform/trainer/Dockerfile.generator, vllm pinned there), never in the trainer's image or torch pin.

The engine starts from an HF folder that ``hf.save_hf`` exported (LlamaForCausalLM names, no tokenizer
needed: prompts go in as token ids and nothing is detokenized). Choices that keep its logprobs those
the trainer's loss expects (SamplingParams: https://docs.vllm.ai/en/latest/api/vllm/sampling_params/;
the order of the V1 sampler's steps and where each logprobs_mode is read: its docstring in
https://github.com/vllm-project/vllm/blob/main/vllm/v1/sample/sampler.py):

- ``logprobs_mode="processed_logprobs"``: logprobs of the distribution actually sampled from, after the
  allowed-token whitelist and the temperature (the default, raw, is the model's untempered softmax), as
  loss.masked_logits computes them on the trainer;
- ``logprobs=0``: only the sampled token's logprob comes back, ``outputs[i].logprobs[j][token_ids[j]]``;
- ``generation_config="vllm"`` and ``top_p=1``: a checkpoint's generation_config.json (Llama's sets top_p
  0.9) must not truncate the distribution behind the loss's back;
- ``stop_token_ids=ends`` (the tokenizer's end-of-sequence ids, which the caller passes) and ``ignore_eos=True``:
  a completion ends on one of those ids or at ``max_tokens`` (or ``max_model_len``), as in TorchGenerator.
  vLLM's own EOS would come from its tokenizer, which is not loaded (``skip_tokenizer_init``), and
  ``generation_config="vllm"`` keeps the checkpoint's from being read: the ends are the run's, passed
  explicitly. The V1 scheduler checks the last output token after appending it (``check_stop`` in
  ``vllm/v1/core/sched/utils.py``: ``last_token_id in stop_token_ids``), so the end id is the last of
  ``token_ids``, as TorchGenerator keeps it. Stop strings are not vLLM's here (they need its detokenizer:
  ``SamplingParams`` refuses ``stop`` with ``detokenize=False``); the controller cuts at them (ends.py);
- after every weight load the prefix cache is reset: cached KV of a prompt was computed by the old weights.

Seeds: the engine seed (``LLM(seed=)``) makes a run reproducible; no per-request seed is set, since a
fixed one would repeat the same samples for a prompt at every call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from trainer.rl.episode import Completion
from trainer.rl.vllm_worker import EXTENSION, PREFIX, TIMEOUT_S, to_hf_named
from trainer.rl.weight_sync import BUCKET_MB

MISSING = (
    "vllm is not installed here: VllmGenerator runs in the generator image "
    "(platform/trainer/Dockerfile.generator); use TorchGenerator elsewhere"
)


class EngineMissing(RuntimeError):
    """vllm cannot be imported in this environment."""


def _import_vllm() -> Any:
    try:
        import vllm  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise EngineMissing(MISSING) from None
    return vllm


def sampled_logprobs(token_ids: Sequence[int], logprobs: Sequence[Mapping[int, Any]] | None) -> tuple[float, ...]:
    """Each sampled token's logprob (vLLM's per-position {token id: Logprob}) as float32 values."""
    if logprobs is None or len(logprobs) != len(token_ids):
        raise RuntimeError("vLLM returned no logprob for some sampled token (was logprobs=0 set?)")
    values = [logprobs[j][token].logprob for j, token in enumerate(token_ids)]
    return tuple(torch.tensor(values, dtype=torch.float32).tolist())


class VllmGenerator:
    """A vLLM engine in this process (its workers in their own), holding one policy version at a time."""

    def __init__(
        self,
        model: str | Path,
        *,
        version: int,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.85,
        dtype: str = "bfloat16",
        seed: int = 0,
        max_model_len: int | None = None,
        enforce_eager: bool = False,
    ) -> None:
        """``model``: an hf.save_hf folder; ``version``: the policy version of the weights in it."""
        if version < 0:
            raise ValueError(f"version {version} < 0: the exported folder holds some policy version")
        vllm = _import_vllm()
        self._sampling = vllm.SamplingParams
        self.llm = vllm.LLM(
            model=str(model),
            skip_tokenizer_init=True,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            dtype=dtype,
            seed=seed,
            max_model_len=max_model_len,
            enforce_eager=enforce_eager,
            worker_extension_cls=EXTENSION,
            logprobs_mode="processed_logprobs",
            generation_config="vllm",
        )
        self.folder, self.dtype, self._version = str(model), dtype, version

    @property
    def version(self) -> int:
        return self._version

    def _params(
        self, n: int, max_tokens: int, temperature: float, allowed: torch.Tensor | None, ends: Sequence[int]
    ) -> Any:
        allowed_ids = None if allowed is None else [int(i) for i in allowed.nonzero().flatten().tolist()]
        if allowed_ids is not None and not allowed_ids:
            raise ValueError("the allowed-token mask allows no token")
        return self._sampling(
            n=n,
            temperature=temperature,
            top_p=1.0,
            max_tokens=max_tokens,
            logprobs=0,
            allowed_token_ids=allowed_ids,
            stop_token_ids=[int(i) for i in ends] or None,
            ignore_eos=True,
            detokenize=False,
        )

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        n: int,
        *,
        max_tokens: int,
        temperature: float,
        allowed: torch.Tensor | None = None,
        ends: Sequence[int] = (),
    ) -> list[list[Completion]]:
        if n < 1 or max_tokens < 1:
            raise ValueError("n and max_tokens must be at least 1")
        version = self._version  # weights change only between calls (load_weights runs in this thread)
        params = self._params(n, max_tokens, temperature, allowed, ends)
        requests = [{"prompt_token_ids": [int(t) for t in p]} for p in prompts]
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        if len(outputs) != len(prompts):
            raise RuntimeError(f"vLLM answered {len(outputs)} of {len(prompts)} prompts")
        return [
            [
                Completion(
                    prompt=tuple(int(t) for t in prompt),
                    response=tuple(int(t) for t in sample.token_ids),
                    logprobs=sampled_logprobs(sample.token_ids, sample.logprobs),
                    version=version,
                )
                for sample in output.outputs
            ]
            for prompt, output in zip(prompts, outputs, strict=True)
        ]

    def load_weights(self, state: Mapping[str, torch.Tensor], version: int) -> None:
        """Hand the trainer's weights (its names) to every worker through the RPC: small models and tests.

        The tensors are pickled into vLLM's worker processes; at 8B use ``open_sync``/``receive`` (NCCL).
        """
        named = [(name, tensor.detach().to("cpu").contiguous()) for name, tensor in to_hf_named(state)]
        self.llm.collective_rpc("meridian_load", args=(named,))
        self._loaded(version)

    @property
    def workers(self) -> int:
        """vLLM's worker processes (tensor parallel x pipeline parallel): each receives every bucket and keeps its
        own slice (vllm_worker.MeridianWorker)."""
        return int(self.llm.llm_engine.vllm_config.parallel_config.world_size)

    def open_sync(
        self,
        host: str,
        port: int,
        *,
        backend: str = "nccl",
        prefix: str = PREFIX,
        wire_dtype: str | None = None,
        timeout_s: float = TIMEOUT_S,
        bucket_bytes: int = BUCKET_MB << 20,
    ) -> int:
        """Join a weight-sync group whose rank 0 sends: the trainer's (vllm_worker.trainer_group, the default
        prefix) or a pair's sender over the controller's store (``prefix`` = the pair's, engines.py).

        Returns the group's size, 1 + ``workers``. Blocks until the sender has joined too: call its side
        from another thread or process. ``wire_dtype`` and ``bucket_bytes``: the sender's (default: the engine's
        dtype, weight_sync's bucket).
        """
        world = 1 + self.workers
        self.llm.collective_rpc(
            "meridian_open_sync",
            args=(host, port, world, self.folder, wire_dtype or self.dtype),
            kwargs={"backend": backend, "prefix": prefix, "timeout_s": timeout_s, "bucket_bytes": bucket_bytes},
        )
        return world

    def close_sync(self) -> None:
        """Close the weight-sync group in every worker (vllm_worker.MeridianWorker.meridian_close_sync)."""
        self.llm.collective_rpc("meridian_close_sync")

    def receive(self) -> int:
        """Receive one version the trainer broadcasts (WeightSync.send over that group), load it, and return it.

        Each bucket is loaded as it arrives: when this raises, some may be in, and the engine holds no version."""
        try:
            versions = set(self.llm.collective_rpc("meridian_receive"))
        except Exception:
            self._version = -1
            raise
        if len(versions) != 1:
            raise RuntimeError(f"the workers received different versions: {sorted(versions)}")
        version = int(versions.pop())
        self._loaded(version)
        return version

    def _loaded(self, version: int) -> None:
        self.llm.reset_prefix_cache()
        self._version = version
