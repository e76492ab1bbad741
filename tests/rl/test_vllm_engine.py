"""VllmGenerator without vllm: a fake `vllm` module (fake_vllm.py, the `engine` fixture) records what the
adapter asks of the engine and answers in vLLM's shapes, so every conversion is checked exactly. The weight
paths run the real worker extension against a fake model runner; the NCCL path runs over gloo between two
processes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from trainer.model.transformer import LanguageModel
from trainer.rl import hf
from trainer.rl.episode import Completion
from trainer.rl.generate import snapshot
from trainer.rl.vllm_engine import MISSING, EngineMissing, VllmGenerator
from trainer.rl.vllm_worker import (
    EXTENSION,
    PREFIX,
    TIMEOUT_S,
    MeridianWorker,
    template,
    to_hf_named,
)
from trainer.rl.weight_sync import layout

from tests.rl.conftest import model_config
from tests.rl.fake_vllm import LOGPROB, Engine, RequestOutput, Sample, loaded


def test_missing_vllm_is_one_line_naming_the_image(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # what an absent package looks like to `import`
    with pytest.raises(EngineMissing) as error:
        VllmGenerator("/nowhere", version=0)
    assert str(error.value) == MISSING
    assert "\n" not in MISSING
    assert "Dockerfile.generator" in MISSING


def test_engine_arguments(engine: Engine) -> None:
    VllmGenerator("/ckpt", version=3, tensor_parallel_size=2, gpu_memory_utilization=0.5, dtype="float16", seed=9)
    assert engine.llm_args == {
        "model": "/ckpt",
        "skip_tokenizer_init": True,
        "tensor_parallel_size": 2,
        "gpu_memory_utilization": 0.5,
        "dtype": "float16",
        "seed": 9,
        "max_model_len": None,
        "enforce_eager": False,
        "worker_extension_cls": EXTENSION,
        "logprobs_mode": "processed_logprobs",
        "generation_config": "vllm",
    }
    module, name = EXTENSION.rsplit(".", 1)
    assert getattr(sys.modules[module], name) is MeridianWorker  # the dotted name vLLM imports resolves


def test_generate_converts_requests_and_outputs(engine: Engine) -> None:
    generator = VllmGenerator("/ckpt", version=4)
    allowed = torch.zeros(16, dtype=torch.bool)
    allowed[[3, 5, 11]] = True
    got = generator.generate([[1, 2], [9]], 2, max_tokens=5, temperature=0.7, allowed=allowed, ends=(11,))
    assert engine.params == [
        {
            "n": 2,
            "temperature": 0.7,
            "top_p": 1.0,
            "max_tokens": 5,
            "logprobs": 0,
            "allowed_token_ids": [3, 5, 11],
            "stop_token_ids": [11],
            "ignore_eos": True,
            "detokenize": False,
        }
    ]
    assert engine.requests == [[{"prompt_token_ids": [1, 2]}, {"prompt_token_ids": [9]}]]
    lp = [torch.tensor(LOGPROB * j, dtype=torch.float32).item() for j in (1, 2)]
    assert got == [
        [
            Completion(prompt=(1, 2), response=(3,), logprobs=(lp[0],), version=4),
            Completion(prompt=(1, 2), response=(5, 11), logprobs=(lp[0], lp[1]), version=4),
        ],
        [
            Completion(prompt=(9,), response=(5,), logprobs=(lp[0],), version=4),
            Completion(prompt=(9,), response=(11, 3), logprobs=(lp[0], lp[1]), version=4),
        ],
    ]
    assert lp[0] != LOGPROB  # the float32 value, not vLLM's float64


def test_generate_without_mask_or_ends(engine: Engine) -> None:
    VllmGenerator("/ckpt", version=0).generate([[1]], 1, max_tokens=2, temperature=1.0)
    assert engine.params[0]["allowed_token_ids"] is None
    assert engine.params[0]["stop_token_ids"] is None


def test_refusals(engine: Engine) -> None:
    generator = VllmGenerator("/ckpt", version=0)
    with pytest.raises(ValueError, match="allows no token"):
        generator.generate([[1]], 1, max_tokens=2, temperature=1.0, allowed=torch.zeros(8, dtype=torch.bool))
    with pytest.raises(ValueError, match="at least 1"):
        generator.generate([[1]], 0, max_tokens=2, temperature=1.0)
    with pytest.raises(ValueError, match="version -1"):
        VllmGenerator("/ckpt", version=-1)


def test_missing_logprobs_are_refused(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    generator = VllmGenerator("/ckpt", version=0)
    monkeypatch.setattr(generator.llm, "generate", lambda *a, **k: [RequestOutput([Sample([1, 2], None)])])
    with pytest.raises(RuntimeError, match="logprobs=0"):
        generator.generate([[1]], 1, max_tokens=2, temperature=1.0)


def test_load_weights_maps_names_resets_cache_and_stamps_version(engine: Engine) -> None:
    cfg = model_config("tiny", precision="fp32")
    torch.manual_seed(0)
    state = snapshot(LanguageModel(cfg))
    generator = VllmGenerator("/ckpt", version=0)
    generator.load_weights(state, 7)
    got = loaded(engine.worker)
    assert set(got) == {hf.to_hf(name) for name in state}
    assert all(torch.equal(got[hf.to_hf(name)], tensor) for name, tensor in state.items())
    assert engine.rpcs == ["meridian_load"]
    assert engine.prefix_resets == 1
    assert generator.version == 7
    assert generator.generate([[1]], 1, max_tokens=1, temperature=1.0)[0][0].version == 7


def test_receive_stamps_the_workers_version_and_refuses_disagreement(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    generator = VllmGenerator("/ckpt", version=0, tensor_parallel_size=2)
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any] | None]] = []
    answers = {"meridian_open_sync": [1, 2], "meridian_receive": [5, 5]}

    def rpc(method: str, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> list[Any]:
        calls.append((method, args, kwargs))
        return answers[method]

    monkeypatch.setattr(generator.llm, "collective_rpc", rpc)
    assert generator.open_sync("10.0.0.1", 29600) == 3  # the trainer and two tensor-parallel workers
    assert calls[0] == (
        "meridian_open_sync",
        ("10.0.0.1", 29600, 3, "/ckpt", "bfloat16"),
        {"backend": "nccl", "prefix": PREFIX, "timeout_s": TIMEOUT_S},
    )
    assert generator.receive() == 5
    assert generator.version == 5
    assert engine.prefix_resets == 1
    answers["meridian_receive"] = [6, 5]
    with pytest.raises(RuntimeError, match="different versions"):
        generator.receive()
    assert generator.version == 5


def test_unknown_parameter_name_is_one_line(engine: Engine) -> None:
    with pytest.raises(ValueError, match=r"'blocks\.0\.adapter\.weight' is not a parameter") as error:
        VllmGenerator("/ckpt", version=0).load_weights({"blocks.0.adapter.weight": torch.zeros(2)}, 1)
    assert "\n" not in str(error.value)
    assert to_hf_named({"head.weight": torch.zeros(1)})[0][0] == "lm_head.weight"


def test_template_is_the_exported_checkpoints_layout(tmp_path: Path) -> None:
    cfg = model_config("tiny", precision="fp32")
    state = snapshot(LanguageModel(cfg))
    hf.save_hf(state, cfg, tmp_path)
    assert layout(template(tmp_path, torch.bfloat16)) == layout(state)
