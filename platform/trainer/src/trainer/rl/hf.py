"""Hugging Face Llama checkpoints in and out of the trainer's model family, every name and shape checked.

The name map (one table, both directions)::

    embed.weight                         model.embed_tokens.weight
    blocks.N.attention_norm.weight       model.layers.N.input_layernorm.weight
    blocks.N.attention.wq|wk|wv|wo       model.layers.N.self_attn.q_proj|k_proj|v_proj|o_proj
    blocks.N.ffn_norm.weight             model.layers.N.post_attention_layernorm.weight
    blocks.N.feed_forward.w1|w3|w2       model.layers.N.mlp.gate_proj|up_proj|down_proj
    norm.weight                          model.norm.weight
    head.weight                          lm_head.weight

Tensors are copied as they are, with no permutation. model/transformer.py's rotary embedding is already HF
Llama's form: ``inv_freq = theta ** (-2i / head_dim)``, the angles repeated as ``cat([a, a])`` across
the head dimension, and ``rotate_half(x) = cat([-x2, x1])``. HF's converter
(convert_llama_weights_to_hf.py) permutes q and k only to go from Meta's interleaved-pair layout to
that form. tests/rl/test_hf.py checks this: an independent forward written from HF's LlamaModel
formulas gives the trainer's logits on the exported tensors. ``nn.RMSNorm`` computes what
LlamaRMSNorm does, attention scales by 1/sqrt(head_dim) as HF does, and the MLP is
``down(silu(gate(x)) * up(x))``. Embeddings stay untied (``tie_word_embeddings: false``). A tied
checkpoint (Llama 3.2 1B) loads with the head copied from the embedding.

Not supported, refused in one line: ``rope_scaling`` (Llama 3.1's long-context "llama3" scaling is
not in model/transformer.py), attention or MLP biases, activations other than SiLU.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from contract import codec
from contract.problem import Invalid
from trainer.config import Model
from trainer.model.flops import ffn_width
from trainer.rl.tokens import ByteTokenizer, HFTokenizer, Tokenizer

CONFIG, WEIGHTS, INDEX, TOKENIZER = "config.json", "model.safetensors", "model.safetensors.index.json", "tokenizer.json"
MAX_JSON = 64 << 20  # bytes: a config or index past this is not one (a 70B index is about 100 KB)

_TOP = {
    "embed.weight": "model.embed_tokens.weight",
    "norm.weight": "model.norm.weight",
    "head.weight": "lm_head.weight",
}
_BLOCK = {
    "attention_norm.weight": "input_layernorm.weight",
    "attention.wq.weight": "self_attn.q_proj.weight",
    "attention.wk.weight": "self_attn.k_proj.weight",
    "attention.wv.weight": "self_attn.v_proj.weight",
    "attention.wo.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "feed_forward.w1.weight": "mlp.gate_proj.weight",
    "feed_forward.w3.weight": "mlp.up_proj.weight",
    "feed_forward.w2.weight": "mlp.down_proj.weight",
}
_HF_KEYS = {  # Model setting -> config.json key
    "vocab": "vocab_size",
    "d_model": "hidden_size",
    "layers": "num_hidden_layers",
    "heads": "num_attention_heads",
    "kv_heads": "num_key_value_heads",
    "ffn_dim": "intermediate_size",
    "seq_len": "max_position_embeddings",
    "rope_theta": "rope_theta",
    "norm_eps": "rms_norm_eps",
}
_TOP_BACK = {v: k for k, v in _TOP.items()}
_BLOCK_BACK = {v: k for k, v in _BLOCK.items()}
_TRAINER_BLOCK = re.compile(r"blocks\.(0|[1-9]\d{0,5})\.(.+)")
_HF_BLOCK = re.compile(r"model\.layers\.(0|[1-9]\d{0,5})\.(.+)")


def to_hf(name: str) -> str:
    """The HF Llama name of a trainer parameter; KeyError for a name not in the map."""
    if name in _TOP:
        return _TOP[name]
    match = _TRAINER_BLOCK.fullmatch(name)
    if match and match[2] in _BLOCK:
        return f"model.layers.{match[1]}.{_BLOCK[match[2]]}"
    raise KeyError(name)


def from_hf(name: str) -> str | None:
    """The trainer's name for an HF Llama tensor, or None when it has none."""
    if name in _TOP_BACK:
        return _TOP_BACK[name]
    match = _HF_BLOCK.fullmatch(name)
    if match and match[2] in _BLOCK_BACK:
        return f"blocks.{match[1]}.{_BLOCK_BACK[match[2]]}"
    return None


def shapes(cfg: Model) -> dict[str, tuple[int, ...]]:
    """Every parameter's shape from the settings alone (tests compare it with LanguageModel on the meta device)."""
    d, head_dim, f = cfg.d_model, cfg.d_model // cfg.heads, ffn_width(cfg)
    q, kv = cfg.heads * head_dim, (cfg.kv_heads or cfg.heads) * head_dim
    block: dict[str, tuple[int, ...]] = {
        "attention_norm.weight": (d,),
        "attention.wq.weight": (q, d),
        "attention.wk.weight": (kv, d),
        "attention.wv.weight": (kv, d),
        "attention.wo.weight": (d, q),
        "ffn_norm.weight": (d,),
        "feed_forward.w1.weight": (f, d),
        "feed_forward.w3.weight": (f, d),
        "feed_forward.w2.weight": (d, f),
    }
    out: dict[str, tuple[int, ...]] = {"embed.weight": (cfg.vocab, d)}
    for i in range(cfg.layers):
        out |= {f"blocks.{i}.{k}": v for k, v in block.items()}
    return out | {"norm.weight": (d,), "head.weight": (cfg.vocab, d)}


def hf_config(cfg: Model, dtype: torch.dtype, ends: tuple[int, ...] = (), bos: int | None = None) -> dict[str, Any]:
    """config.json for LlamaForCausalLM (what transformers and vLLM read); ``ends``/``bos``: the tokenizer's ids."""
    tokens: dict[str, Any] = {"eos_token_id": ends[0] if len(ends) == 1 else list(ends)} if ends else {}
    return (
        tokens
        | ({"bos_token_id": bos} if bos is not None else {})
        | {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": cfg.vocab,
            "hidden_size": cfg.d_model,
            "intermediate_size": ffn_width(cfg),
            "num_hidden_layers": cfg.layers,
            "num_attention_heads": cfg.heads,
            "num_key_value_heads": cfg.kv_heads or cfg.heads,
            "head_dim": cfg.d_model // cfg.heads,
            "max_position_embeddings": cfg.seq_len,
            "rope_theta": cfg.rope_theta,
            "rope_scaling": None,
            "rms_norm_eps": cfg.norm_eps,
            "hidden_act": "silu",
            "attention_bias": False,
            "mlp_bias": False,
            "tie_word_embeddings": False,
            "torch_dtype": str(dtype).removeprefix("torch."),
        }
    )


def _refuse(where: str, what: str, fix: str) -> Invalid:
    return Invalid([f"{where}: {what}; {fix}"])


def _rope_theta(hf: Mapping[str, Any], where: str) -> Any:
    rope = hf.get("rope_parameters")  # transformers 5 moved rope_theta and the scaling here
    scaling = hf.get("rope_scaling") or (rope if isinstance(rope, dict) else None)
    if scaling is not None and not isinstance(scaling, dict):
        raise _refuse(where, f"rope_scaling {str(scaling)[:80]!r} is not an object or null", "set it to null")
    if isinstance(scaling, dict) and scaling.get("rope_type", scaling.get("type", "default")) != "default":
        raise _refuse(
            where,
            f"rope scaling {scaling.get('rope_type', scaling.get('type'))!r} is not implemented in the trainer's model",
            "use a checkpoint without rope_scaling (or drop it and keep seq_len short)",
        )
    return rope.get("rope_theta", 10000.0) if isinstance(rope, dict) else hf.get("rope_theta", 10000.0)


def model_config(hf: Any, where: str) -> tuple[Model, bool]:
    """The trainer's Model settings for an HF Llama config.json, and whether its embeddings are tied."""
    if not isinstance(hf, dict):
        raise _refuse(where, "not a JSON object", "point at a Hugging Face Llama checkpoint folder")
    architectures = hf.get("architectures")
    if hf.get("model_type") != "llama" and not (
        isinstance(architectures, list) and "LlamaForCausalLM" in architectures
    ):
        raise _refuse(where, f"model_type {hf.get('model_type')!r} is not llama", "use a Llama-architecture checkpoint")
    for key, wanted in (("hidden_act", "silu"), ("attention_bias", False), ("mlp_bias", False)):
        if hf.get(key, wanted) != wanted:
            raise _refuse(where, f"{key} {hf[key]!r} is not supported (the model has {wanted!r})", "use a plain Llama")
    heads, theta = hf.get("num_attention_heads"), _rope_theta(hf, where)
    values = {key: hf.get(key) for key in _HF_KEYS.values()} | {
        "num_key_value_heads": hf.get("num_key_value_heads", heads),
        "max_position_embeddings": hf.get("max_position_embeddings", 2048),
        "rms_norm_eps": hf.get("rms_norm_eps", 1e-6),
        "rope_theta": float(theta) if isinstance(theta, int) and not isinstance(theta, bool) else theta,
    }
    decoded, problems = codec.decode(Model, {ours: values[theirs] for ours, theirs in _HF_KEYS.items()})
    if problems:  # named as config.json names them, not as the trainer does
        path = problems[0].path
        key = _HF_KEYS.get(str(path[0]), str(path[0])) if path else "(document)"
        what = problems[0].message.split("; ")[0]
        raise _refuse(where, f"{key}: {what}", f"set {key} to a valid value")
    assert decoded is not None
    cfg = decoded
    if cfg.d_model % cfg.heads or cfg.heads % (cfg.kv_heads or cfg.heads) or (cfg.d_model // cfg.heads) % 2:
        raise _refuse(
            where,
            "heads and key/value heads do not divide hidden_size into even head dimensions",
            "fix num_attention_heads or num_key_value_heads",
        )
    if hf.get("head_dim") not in (None, cfg.d_model // cfg.heads):
        raise _refuse(where, f"head_dim {hf['head_dim']} != hidden_size / num_attention_heads", "use a plain Llama")
    return cfg, bool(hf.get("tie_word_embeddings", False))


def differences(checkpoint: Model, cfg: Model) -> list[str]:
    """The ``model.KEY=VALUE`` overrides that give ``cfg`` the checkpoint's architecture; [] when it has it."""
    from trainer.model.flops import ffn_width
    from trainer.model.transformer import kv_heads

    def effective(m: Model, key: str) -> Any:
        return {"kv_heads": kv_heads(m), "ffn_dim": ffn_width(m)}.get(key, getattr(m, key))

    return [f"model.{k}={getattr(checkpoint, k)}" for k in _HF_KEYS if effective(checkpoint, k) != effective(cfg, k)]


def start_problem(source: str, cfg: Model, where: str = "rl.hf_checkpoint") -> str | None:
    """One line when the checkpoint folder at ``source`` is unreadable or not the run's model; None when it fits."""
    try:
        checkpoint, _ = model_config(read_json(Path(source) / CONFIG), f"{where}: {Path(source) / CONFIG}")
    except Invalid as error:
        return error.lines[0]
    changes = differences(checkpoint, cfg)
    if changes:
        return f"{where}: {source} is a different model than the run's; set {' '.join(changes)}"
    return None


def read_json(path: Path) -> Any:
    try:
        if path.stat().st_size > MAX_JSON:
            raise _refuse(str(path), f"larger than {MAX_JSON} bytes", "this is not a checkpoint's JSON file")
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _refuse(str(path), f"cannot read it ({type(e).__name__}: {str(e)[:120]})", "restore the file") from None


def _weight_files(folder: Path) -> dict[str, list[str]]:
    """File name -> the tensor names the index puts in it (a single file: [] means all it holds)."""
    if (folder / INDEX).is_file():
        index = read_json(folder / INDEX)
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not weight_map:
            raise _refuse(str(folder / INDEX), "no weight_map", "restore the index from the checkpoint")
        files: dict[str, list[str]] = {}
        for name, file in weight_map.items():
            if not isinstance(file, str) or Path(file).name != file or not file.endswith(".safetensors"):
                raise _refuse(
                    str(folder / INDEX),
                    f"{name}: {str(file)[:80]!r} is not a file in the folder",
                    "the index may name only .safetensors files beside it",
                )
            files.setdefault(file, []).append(name)
        return files
    if (folder / WEIGHTS).is_file():
        return {WEIGHTS: []}
    raise _refuse(str(folder), f"no {WEIGHTS} or {INDEX}", "point at a Hugging Face checkpoint folder")


def _read_tensors(folder: Path, file: str, listed: list[str], cfg: Model) -> dict[str, torch.Tensor]:
    """The trainer-named tensors of one safetensors file, every name, shape and value checked."""
    from safetensors import SafetensorError, safe_open  # imported here: only checkpoint import needs it

    where, expected = str(folder / file), shapes(cfg)
    out: dict[str, torch.Tensor] = {}
    try:
        with safe_open(str(folder / file), framework="pt", device="cpu") as f:
            names = list(f.keys())
            if listed and set(listed) != set(names):
                stray = sorted(set(listed) ^ set(names))[:3]
                raise _refuse(where, f"holds other tensors than the index lists ({stray})", "restore the checkpoint")
            for name in names:
                ours = from_hf(name)
                if ours is None or ours not in expected:
                    raise _refuse(
                        where, f"unknown tensor {name[:120]!r} for this config", "use a plain Llama checkpoint"
                    )
                shape = tuple(f.get_slice(name).get_shape())
                if shape != expected[ours]:
                    raise _refuse(
                        where, f"{name} is {shape}, the config says {expected[ours]}", "restore the checkpoint"
                    )
                tensor = f.get_tensor(name)
                if not tensor.is_floating_point() or not bool(torch.isfinite(tensor).all()):
                    raise _refuse(where, f"{name} is not finite floating point", "restore the checkpoint")
                out[ours] = tensor
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise _refuse(
            where, f"not a readable safetensors file ({type(e).__name__}: {str(e)[:120]})", "restore the checkpoint"
        ) from None
    return out


def load_hf(folder: str | Path) -> tuple[Model, dict[str, torch.Tensor]]:
    """The Model settings and the state_dict (trainer names, dtypes as stored) of an HF Llama checkpoint folder.

    Every tensor name must map, every parameter must be present once, with the shape the config
    implies and finite values; anything else is one line (Invalid), never a traceback.
    """
    folder = Path(folder)
    cfg, tied = model_config(read_json(folder / CONFIG), str(folder / CONFIG))
    state: dict[str, torch.Tensor] = {}
    for file, listed in _weight_files(folder).items():
        for name, tensor in _read_tensors(folder, file, listed, cfg).items():
            if name in state:
                raise _refuse(str(folder / file), f"{to_hf(name)} is stored twice", "restore the checkpoint")
            state[name] = tensor
    if tied and "head.weight" not in state and "embed.weight" in state:
        state["head.weight"] = state["embed.weight"].clone()  # untied from here on: the trainer trains both
    missing = sorted(set(shapes(cfg)) - set(state))
    if missing:
        names = ", ".join(to_hf(m) for m in missing[:3])
        raise _refuse(str(folder), f"{len(missing)} tensors missing ({names})", "restore the checkpoint")
    return cfg, state


def save_hf(
    state: Mapping[str, torch.Tensor], cfg: Model, folder: str | Path, dtype: torch.dtype | None = None
) -> None:
    """config.json and model.safetensors that LlamaForCausalLM (transformers, vLLM) loads; ``dtype``: cast first."""
    expected = shapes(cfg)
    if set(state) != set(expected) or any(tuple(state[k].shape) != v for k, v in expected.items()):
        raise ValueError("state does not match the model config (names or shapes)")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    dtype = dtype or next(iter(state.values())).dtype
    write_weights(folder, [list(state)], lambda names: state, dtype)
    (folder / CONFIG).write_text(json.dumps(hf_config(cfg, dtype), indent=2, sort_keys=True) + "\n")


def shard_plan(sizes: Mapping[str, int], max_bytes: int) -> list[list[str]]:
    """The names in order, packed into files of at most ``max_bytes`` (a larger tensor gets a file to itself)."""
    plan: list[list[str]] = [[]]
    used = 0
    for name, size in sizes.items():
        if plan[-1] and used + size > max_bytes:
            plan.append([])
            used = 0
        plan[-1].append(name)
        used += size
    return plan


def weight_files(count: int) -> list[str]:
    """The file names of ``count`` weight files, as transformers' save_pretrained names them."""
    return [WEIGHTS] if count == 1 else [f"model-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)]


def write_weights(
    folder: Path, plan: list[list[str]], read: Callable[[list[str]], Mapping[str, torch.Tensor]], dtype: torch.dtype
) -> int:
    """Write each file of ``plan`` (``read(names)`` gives its trainer-named tensors), then the index; the bytes written.

    One file's tensors are in memory at a time. More than one file: ``model.safetensors.index.json`` maps each HF
    name to its file, as ``load_hf`` and transformers read it.
    """
    from safetensors.torch import save_file  # imported here: only checkpoint export needs it

    weight_map: dict[str, str] = {}
    total = 0
    for file, names in zip(weight_files(len(plan)), plan, strict=True):
        state = read(names)
        if set(state) != set(names):
            raise ValueError(f"{file}: read {sorted(state)[:3]}..., expected {names[:3]}...")
        tensors = {to_hf(k): v.detach().to("cpu", dtype).contiguous() for k, v in state.items()}
        partial = folder / f".{file}.partial"
        save_file(tensors, str(partial), metadata={"format": "pt"})
        os.replace(partial, folder / file)  # a reader sees the old file or the whole new one, never half
        weight_map |= dict.fromkeys(tensors, file)
        total += sum(t.numel() * t.element_size() for t in tensors.values())
    if len(plan) > 1:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (folder / INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return total


def load_tokenizer(folder: str | Path, vocab: int) -> Tokenizer:
    """The checkpoint's tokenizer.json when it has one (its ids must fit the model's vocab; its end-of-sequence ids
    from the folder's generation_config.json or tokenizer_config.json), else byte tokens."""
    path = Path(folder) / TOKENIZER
    if not path.is_file():
        if vocab < 256:
            raise _refuse(str(folder), f"no {TOKENIZER} and vocab {vocab} < 256 byte tokens", "add the tokenizer")
        return ByteTokenizer()
    try:
        tokenizer = HFTokenizer.from_folder(Path(folder))
    except Invalid:
        raise
    except Exception as e:  # the tokenizers library raises its own exception type for a bad file
        raise _refuse(str(path), f"not a tokenizer ({str(e)[:120]})", "restore tokenizer.json") from None
    if tokenizer.vocab_size > vocab:
        raise _refuse(str(path), f"{tokenizer.vocab_size} tokens, the model has {vocab}", "use the model's tokenizer")
    return tokenizer


def fetch(url: str, dest: str | Path, only: tuple[str, ...] = ()) -> Path:
    """Copy a checkpoint folder from a bucket (``gs://...``, any fsspec URL) to ``dest``; a local path is returned as is.

    ``only``: just these files (the export takes a checkpoint's tokenizer files, not its weights).
    """
    if "://" not in url:
        return Path(url)
    import fsspec  # type: ignore[import-untyped]  # imported here: local checkpoints never need it

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        fs, root = fsspec.core.url_to_fs(url)
        wanted = [
            p
            for p in fs.ls(root, detail=False)
            if (Path(p).name in only)
            or (not only and (Path(p).name in (CONFIG, INDEX, TOKENIZER) or str(p).endswith(".safetensors")))
        ]
        for remote in wanted:
            fs.get(remote, str(dest / Path(remote).name))
    except (OSError, ValueError) as e:
        raise _refuse(url, f"cannot copy it ({type(e).__name__}: {str(e)[:120]})", "check the URL and access") from None
    return dest
