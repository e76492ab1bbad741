from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file
from trainer.config import Model
from trainer.model.transformer import LanguageModel
from trainer.rl import hf
from trainer.rl.tokens import ByteTokenizer

from contract.problem import Invalid
from tests.rl.conftest import model_config, model_names


@pytest.mark.parametrize("size", model_names())
def test_the_name_map_covers_every_parameter_of_every_size_with_its_shape(size: str) -> None:
    cfg = model_config(size)
    with torch.device("meta"):
        model = LanguageModel(cfg)
    actual = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    assert hf.shapes(cfg) == actual
    names = [hf.to_hf(name) for name in actual]
    assert len(set(names)) == len(names)  # one HF name each
    assert all(hf.from_hf(n) == name for n, name in zip(names, actual, strict=True))


@pytest.mark.parametrize("name", ["blocks.0.attention.wq.bias", "blocks.01.norm.weight", "embed", "head.weight.x"])
def test_names_outside_the_map_are_not_guessed(name: str) -> None:
    with pytest.raises(KeyError):
        hf.to_hf(name)
    assert hf.from_hf("model.layers.01.mlp.gate_proj.weight") is None
    assert hf.from_hf("model.layers.0.self_attn.rotary_emb.inv_freq") is None


def _export(cfg: Model, folder: Path, seed: int = 0) -> LanguageModel:
    torch.manual_seed(seed)
    model = LanguageModel(cfg)
    hf.save_hf(model.state_dict(), cfg, folder)
    return model


def test_save_then_load_is_bit_exact(tiny: Model, tmp_path: Path) -> None:
    model = _export(tiny, tmp_path)
    cfg, state = hf.load_hf(tmp_path)
    same = ("vocab", "d_model", "layers", "heads", "kv_heads", "ffn_dim", "seq_len", "rope_theta", "norm_eps")
    assert {k: getattr(cfg, k) for k in same} == {k: getattr(tiny, k) for k in same}
    ours = model.state_dict()
    assert set(state) == set(ours)
    assert all(torch.equal(state[k], ours[k]) for k in ours)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["tie_word_embeddings"] is False


def _hf_llama_logits(state: dict[str, torch.Tensor], config: dict[str, Any], tokens: torch.Tensor) -> torch.Tensor:
    """HF's LlamaModel forward, written from modeling_llama's formulas on HF names (no trainer code)."""
    heads, kv, eps = (
        int(config["num_attention_heads"]),
        int(config["num_key_value_heads"]),
        float(config["rms_norm_eps"]),
    )
    dim = int(config["hidden_size"]) // heads
    inv_freq = 1.0 / (float(config["rope_theta"]) ** (torch.arange(0, dim, 2).float() / dim))
    emb = torch.cat([torch.outer(torch.arange(tokens.shape[1]).float(), inv_freq)] * 2, dim=-1)
    cos, sin = emb.cos(), emb.sin()

    def rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        return torch.cat((-x[..., dim // 2 :], x[..., : dim // 2]), dim=-1)

    b, t = tokens.shape
    x = state["model.embed_tokens.weight"][tokens]
    for i in range(int(config["num_hidden_layers"])):
        p = f"model.layers.{i}."
        h = rms(x, state[p + "input_layernorm.weight"])
        q = (h @ state[p + "self_attn.q_proj.weight"].T).view(b, t, heads, dim).transpose(1, 2)
        k = (h @ state[p + "self_attn.k_proj.weight"].T).view(b, t, kv, dim).transpose(1, 2)
        v = (h @ state[p + "self_attn.v_proj.weight"].T).view(b, t, kv, dim).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(heads // kv, dim=1), v.repeat_interleave(heads // kv, dim=1)
        scores = (q @ k.transpose(-1, -2)) / dim**0.5 + torch.full((t, t), float("-inf")).triu(1)
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, heads * dim)
        x = x + out @ state[p + "self_attn.o_proj.weight"].T
        h = rms(x, state[p + "post_attention_layernorm.weight"])
        gate, up = h @ state[p + "mlp.gate_proj.weight"].T, h @ state[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ state[p + "mlp.down_proj.weight"].T
    return rms(x, state["model.norm.weight"]) @ state["lm_head.weight"].T


def test_an_independent_hf_llama_forward_gives_the_trainers_logits(tiny: Model, tmp_path: Path) -> None:
    """The RoPE layout, the q/k (no) permutation and the gate/up/down order, checked by the numbers."""
    model = _export(tiny, tmp_path)
    from safetensors.torch import load_file

    state = load_file(str(tmp_path / "model.safetensors"))
    config = json.loads((tmp_path / "config.json").read_text())
    tokens = torch.tensor([list(b"3+4=7 and 12+5=17"), list(b"the quick brown f")])
    with torch.no_grad():
        torch.testing.assert_close(_hf_llama_logits(state, config, tokens), model(tokens), rtol=1e-4, atol=1e-5)


def test_a_sharded_checkpoint_loads(tiny: Model, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = LanguageModel(tiny)
    tensors = {hf.to_hf(k): v.contiguous() for k, v in model.state_dict().items()}
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, part in shards.items():
        save_file({n: tensors[n] for n in part}, str(tmp_path / file))
    index = {"weight_map": {n: f for f, part in shards.items() for n in part}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    (tmp_path / "config.json").write_text(json.dumps(hf.hf_config(tiny, torch.float32)))
    _, state = hf.load_hf(tmp_path)
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())


def test_tied_embeddings_load_with_the_head_copied(tiny: Model, tmp_path: Path) -> None:
    _export(tiny, tmp_path)
    state = hf.load_hf(tmp_path)[1]
    del state["head.weight"]
    save_file({hf.to_hf(k): v for k, v in state.items()}, str(tmp_path / "model.safetensors"))
    config = json.loads((tmp_path / "config.json").read_text()) | {"tie_word_embeddings": True}
    (tmp_path / "config.json").write_text(json.dumps(config))
    loaded = hf.load_hf(tmp_path)[1]
    assert torch.equal(loaded["head.weight"], loaded["embed.weight"])
    assert loaded["head.weight"].data_ptr() != loaded["embed.weight"].data_ptr()


def _edit_config(folder: Path, **changes: object) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | changes))


def _edit_tensors(folder: Path, change: dict[str, torch.Tensor | None]) -> None:
    from safetensors.torch import load_file

    tensors = load_file(str(folder / "model.safetensors"))
    for name, value in change.items():
        if value is None:
            del tensors[name]
        else:
            tensors[name] = value
    save_file(tensors, str(folder / "model.safetensors"))


def _truncate(folder: Path) -> None:
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])


def _forge_header(folder: Path) -> None:
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[8:20] = b"not a header"
    (folder / "model.safetensors").write_bytes(bytes(data))


FORGERIES: dict[str, tuple[Callable[[Path], object], str]] = {
    "config not json": (lambda f: (f / "config.json").write_text("{"), "config.json: cannot read it"),
    "not llama": (lambda f: _edit_config(f, model_type="gpt2", architectures=["GPT2LMHeadModel"]), "is not llama"),
    "rope scaling": (lambda f: _edit_config(f, rope_scaling={"rope_type": "llama3", "factor": 8.0}), "'llama3'"),
    "bias": (lambda f: _edit_config(f, attention_bias=True), "attention_bias True is not supported"),
    "negative size": (lambda f: _edit_config(f, hidden_size=-64), "hidden_size: must be at least 1 (got -64)"),
    "text size": (lambda f: _edit_config(f, num_hidden_layers="2"), "num_hidden_layers: "),
    "head dim": (lambda f: _edit_config(f, head_dim=32), "head_dim 32"),
    "architectures": (lambda f: _edit_config(f, model_type=None, architectures=7), "model_type None is not llama"),
    "rope scaling text": (lambda f: _edit_config(f, rope_scaling="yarn"), "rope_scaling 'yarn' is not an object"),
    "unknown tensor": (
        lambda f: _edit_tensors(f, {"model.layers.0.self_attn.q_proj.bias": torch.zeros(64)}),
        "unknown tensor 'model.layers.0.self_attn.q_proj.bias'",
    ),
    "layer past the config": (
        lambda f: _edit_tensors(f, {"model.layers.2.input_layernorm.weight": torch.ones(64)}),
        "unknown tensor 'model.layers.2.input_layernorm.weight'",
    ),
    "missing tensor": (
        lambda f: _edit_tensors(f, {"model.layers.1.mlp.up_proj.weight": None}),
        "1 tensors missing (model.layers.1.mlp.up_proj.weight)",
    ),
    "wrong shape": (
        lambda f: _edit_tensors(f, {"model.norm.weight": torch.ones(32)}),
        "model.norm.weight is (32,), the config says (64,)",
    ),
    "not finite": (
        lambda f: _edit_tensors(f, {"model.norm.weight": torch.full((64,), float("nan"))}),
        "model.norm.weight is not finite",
    ),
    "integers": (
        lambda f: _edit_tensors(f, {"model.norm.weight": torch.ones(64, dtype=torch.int32)}),
        "model.norm.weight is not finite floating point",
    ),
    "truncated": (_truncate, "not a readable safetensors file"),
    "forged header": (_forge_header, "not a readable safetensors file"),
    "no weights": (lambda f: (f / "model.safetensors").unlink(), "no model.safetensors"),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_forged_checkpoint_is_one_line(tiny: Model, tmp_path: Path, forgery: str) -> None:
    _export(tiny, tmp_path)
    forge, expected = FORGERIES[forgery]
    forge(tmp_path)
    with pytest.raises(Invalid) as error:
        hf.load_hf(tmp_path)
    (line,) = error.value.lines
    assert expected in line
    assert "\n" not in line
    assert "; " in line
    assert line.startswith(str(tmp_path))


@pytest.mark.parametrize(
    ("weight_map", "expected"),
    [
        ({"model.norm.weight": "../model.safetensors"}, "is not a file in the folder"),
        ({"model.norm.weight": "model.safetensors"}, "holds other tensors than the index lists"),
        ({}, "no weight_map"),
    ],
)
def test_a_forged_index_is_one_line(tiny: Model, tmp_path: Path, weight_map: dict[str, str], expected: str) -> None:
    _export(tiny, tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(Invalid, match=r"model\.safetensors") as error:
        hf.load_hf(tmp_path)
    assert expected in error.value.lines[0]
    assert len(error.value.lines) == 1


def _tokenizer_json(folder: Path, words: list[str]) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate(["[UNK]", *words])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))


def test_the_checkpoints_tokenizer_or_byte_tokens(tmp_path: Path) -> None:
    assert isinstance(hf.load_tokenizer(tmp_path, vocab=256), ByteTokenizer)
    _tokenizer_json(tmp_path, ["three", "plus", "four", "is", "seven"])
    tokenizer = hf.load_tokenizer(tmp_path, vocab=256)
    assert tokenizer.encode("three plus four is seven") == [1, 2, 3, 4, 5]
    assert tokenizer.decode([1, 2, 3]) == "three plus four"
    with pytest.raises(Invalid, match="6 tokens, the model has 4"):
        hf.load_tokenizer(tmp_path, vocab=4)
    (tmp_path / "tokenizer.json").write_text('{"version": "1.0", "model": 7}')
    with pytest.raises(Invalid, match=r"tokenizer\.json: not a tokenizer") as error:
        hf.load_tokenizer(tmp_path, vocab=256)
    assert len(error.value.lines) == 1


def test_a_checkpoint_from_a_bucket_url_is_copied_first(tiny: Model, tmp_path: Path) -> None:
    model = _export(tiny, tmp_path / "bucket" / "ckpt")
    local = hf.fetch(f"file://{tmp_path / 'bucket' / 'ckpt'}", tmp_path / "local")
    assert sorted(p.name for p in local.iterdir()) == ["config.json", "model.safetensors"]
    assert torch.equal(hf.load_hf(local)[1]["head.weight"], model.head.weight.detach())
    assert hf.fetch(str(tmp_path), tmp_path / "unused") == tmp_path
    with pytest.raises(Invalid, match="cannot copy it"):
        hf.fetch(f"file://{tmp_path / 'nowhere'}", tmp_path / "local2")
