"""What a serving folder holds beside the weights: the run's tokenizer and the defaults to sample it at.

The tokenizer is the one the run used. With ``rl.hf_checkpoint`` that has a ``tokenizer.json``, its files are
copied as they are (the model's tokenizer is not the export's to rewrite); a missing ``tokenizer_config.json``
is written with the eos and bos its other files name. Otherwise the run used the trainer's byte tokens (id =
byte value), written as a ``tokenizer.json`` transformers and vLLM read: a byte-level BPE with no merges whose
256 tokens are GPT-2's byte alphabet, so each byte is its own id. Byte tokens have no end-of-sequence token:
the trainer's byte-token tasks end by length (``rl.max_tokens``), and pretraining text is bytes without one.
No eos is written for them; an RL export's ``max_new_tokens`` (below) stops a server where the trainer stopped.

``generation_config.json`` starts from the checkpoint's own (with its tokenizer) and names the eos ids. An RL
export adds what the policy was trained to sample at: ``do_sample``, ``temperature`` = ``rl.temperature`` (the
GRPO loss scores softmax(logits / T), so the tempered distribution is the policy that was trained), ``top_p`` 1
and no top-k, min-p, typical-p or repetition penalty (a checkpoint's own truncation would sample a distribution
the loss never saw), ``max_new_tokens`` = ``rl.max_tokens``. Not expressible there: ``rl.allowed`` (a decoding
mask; vLLM takes ``allowed_token_ids`` per request) and the prompts' encoding (the trainer adds no special
tokens: a tokenizer whose post-processor adds a BOS must be called with ``add_special_tokens=False``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.problem import Invalid
from trainer.rl.hf import CONFIG, TOKENIZER, read_json
from trainer.rl.settings import RL

TOKENIZER_CONFIG, GENERATION_CONFIG = "tokenizer_config.json", "generation_config.json"
COPIED = (TOKENIZER, TOKENIZER_CONFIG, "special_tokens_map.json", "chat_template.jinja")  # taken as they are
BYTES = 256
# Sampling settings of a checkpoint's generation_config.json that truncate or reshape the distribution: an RL
# export drops them (the trainer samples the tempered distribution whole).
RESHAPING = ("top_k", "min_p", "typical_p", "repetition_penalty", "epsilon_cutoff", "eta_cutoff")


@dataclass(frozen=True)
class Tokens:
    """The tokenizer files to write (name -> bytes), its end and begin ids, and where it came from."""

    files: dict[str, bytes]
    ends: tuple[int, ...]
    bos: int | None
    source: str  # the export's report line: "byte tokens", "rl.hf_checkpoint <folder>", "none: ..."
    generation: dict[str, Any] = field(default_factory=dict)  # the checkpoint's generation_config.json


def byte_alphabet() -> list[str]:
    """GPT-2's printable stand-in for each byte, by byte value: what the ByteLevel pre-tokenizer turns bytes into.

    Printable Latin-1 bytes stand for themselves; the others, in byte order, for chr(256), chr(257), ...
    """
    kept = {*range(33, 127), *range(161, 173), *range(174, 256)}
    others = iter(range(256, 512))
    return [chr(b) if b in kept else chr(next(others)) for b in range(BYTES)]


def byte_tokenizer_json() -> str:
    """tokenizer.json for the trainer's byte tokens: id = byte value, no merges, no special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {char: byte for byte, char in enumerate(byte_alphabet())}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    return str(tokenizer.to_str(pretty=True))


def _json(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


def _tokenizer_config(seq_len: int, texts: dict[str, str]) -> bytes:
    base = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": seq_len}
    return _json(base | {"clean_up_tokenization_spaces": False} | texts)


def byte_tokens(vocab: int, seq_len: int) -> Tokens:
    """The trainer's byte tokens as files; none when the model has fewer than 256 ids (no byte fits it whole)."""
    if vocab < BYTES:
        return Tokens({}, (), None, f"none: vocab {vocab} < {BYTES} byte tokens (load it with skip_tokenizer_init)")
    files = {TOKENIZER: byte_tokenizer_json().encode(), TOKENIZER_CONFIG: _tokenizer_config(seq_len, {})}
    return Tokens(files, (), None, "byte tokens (id = byte value, no eos)")


def _ids(value: Any, where: str, key: str, vocab: int) -> tuple[int, ...]:
    ids = value if isinstance(value, list) else [value]
    if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < vocab for i in ids):
        raise Invalid([f"{where}: {key} {str(value)[:80]} is not ids in [0, {vocab}); fix it or restore the file"])
    return tuple(dict.fromkeys(ids))


def _named(folder: Path, which: str, token_id: Callable[[str], int | None], vocab: int) -> tuple[int, ...]:
    """The ids of ``which`` ("eos" or "bos") the folder names: generation_config.json, tokenizer_config.json's
    token text, then config.json (transformers reads the same files); () when none does."""
    for name in (GENERATION_CONFIG, CONFIG):
        data = read_json(folder / name) if (folder / name).is_file() else {}
        if isinstance(data, dict) and data.get(f"{which}_token_id") is not None:
            return _ids(data[f"{which}_token_id"], str(folder / name), f"{which}_token_id", vocab)
        if name == GENERATION_CONFIG and (folder / TOKENIZER_CONFIG).is_file():
            config = read_json(folder / TOKENIZER_CONFIG)
            token = config.get(f"{which}_token") if isinstance(config, dict) else None
            text = token.get("content") if isinstance(token, dict) else token
            if isinstance(text, str) and text:
                found = token_id(text)
                if found is None:
                    where = folder / TOKENIZER_CONFIG
                    raise Invalid([f"{where}: {which}_token {text[:80]!r} is not in {TOKENIZER}; restore the file"])
                return (found,)
    return ()


def checkpoint_tokens(folder: Path, vocab: int, seq_len: int) -> Tokens:
    """``folder``'s tokenizer files as they are (it has a tokenizer.json), with the eos and bos they name."""
    from tokenizers import Tokenizer

    path = folder / TOKENIZER
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as e:  # the tokenizers library raises its own exception type for a bad file
        raise Invalid([f"{path}: not a tokenizer ({str(e)[:120]}); restore tokenizer.json"]) from None
    size = int(tokenizer.get_vocab_size(with_added_tokens=True))
    if size > vocab:
        raise Invalid([f"{path}: {size} tokens, the model has {vocab}; use the model's tokenizer"])

    def token_id(text: str) -> int | None:
        found = tokenizer.token_to_id(text)
        return None if found is None else int(found)

    ends, bos = _named(folder, "eos", token_id, vocab), _named(folder, "bos", token_id, vocab)
    files = {name: (folder / name).read_bytes() for name in COPIED if (folder / name).is_file()}
    if TOKENIZER_CONFIG not in files:
        texts = {k: str(tokenizer.id_to_token(ids[0])) for k, ids in (("eos_token", ends), ("bos_token", bos)) if ids}
        files[TOKENIZER_CONFIG] = _tokenizer_config(seq_len, texts)
    generation = read_json(folder / GENERATION_CONFIG) if (folder / GENERATION_CONFIG).is_file() else {}
    if not isinstance(generation, dict):
        raise Invalid([f"{folder / GENERATION_CONFIG}: not a JSON object; restore the file"])
    return Tokens(files, ends, bos[0] if bos else None, f"rl.hf_checkpoint {folder}", generation)


def generation_config(tokens: Tokens, rl: RL | None) -> dict[str, Any]:
    """generation_config.json: the checkpoint's, its eos and bos, and for an RL run (``rl``) the trained sampling."""
    out = dict(tokens.generation)
    if tokens.ends:
        out["eos_token_id"] = tokens.ends[0] if len(tokens.ends) == 1 else list(tokens.ends)
    if tokens.bos is not None:
        out["bos_token_id"] = tokens.bos
    if rl is None:
        return out
    out = {k: v for k, v in out.items() if k not in RESHAPING}
    return out | {"do_sample": True, "temperature": rl.temperature, "top_p": 1.0, "max_new_tokens": rl.max_tokens}
