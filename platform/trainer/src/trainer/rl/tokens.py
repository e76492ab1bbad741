"""Text to token ids and back: byte tokens (the trainer's text data: id = byte value) or a Hugging Face tokenizer.

A tokenizer also says where a completion ends (``ends``: its end-of-sequence ids; byte tokens have none) and
which of its tokens are digits (``digit_ids``: what ``rl.allowed=digits`` samples from).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

import torch

from contract.problem import Invalid


class Tokenizer(Protocol):
    @property
    def ends(self) -> tuple[int, ...]:
        """The ids that end a completion (end of sequence), sorted; () when the tokenizer has none."""
        ...

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes, one token each (vocab 256), as data/batches.py's text batches. No end-of-sequence token."""

    ends: tuple[int, ...] = ()
    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode())

    def decode(self, ids: list[int]) -> str:
        # A sampled id can be any vocab entry: ids past 255 and broken UTF-8 decode to U+FFFD, never raise.
        return bytes(i if 0 <= i < 256 else ord("?") for i in ids).decode(errors="replace")


# Where a checkpoint folder names its end of sequence, first found wins (transformers reads the same files):
# generation_config.json's eos_token_id (an id or a list: Llama 3 instruct ends on three) is what generate()
# stops on; tokenizer_config.json's eos_token is a token's text ("</s>", or {"content": "</s>"}).
GENERATION_CONFIG, TOKENIZER_CONFIG = "generation_config.json", "tokenizer_config.json"


class HFTokenizer:
    """A ``tokenizer.json`` through the ``tokenizers`` library, without special tokens added.

    ``ends``: its end-of-sequence ids; ``HFTokenizer.from_folder`` reads them from the files beside it.
    """

    def __init__(self, path: Path, ends: tuple[int, ...] = ()) -> None:
        from tokenizers import Tokenizer as Fast  # imported here: byte-token runs never need it

        self._tokenizer = Fast.from_file(str(path))
        self.ends = tuple(sorted(set(ends)))

    @classmethod
    def from_folder(cls, folder: Path) -> HFTokenizer:
        """``folder/tokenizer.json`` with the end ids its generation_config.json or tokenizer_config.json name."""
        tokenizer = cls(folder / "tokenizer.json")
        tokenizer.ends = end_ids(folder, tokenizer)
        return tokenizer

    @property
    def vocab_size(self) -> int:
        return int(self._tokenizer.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return str(self._tokenizer.decode(ids, skip_special_tokens=True))

    def token_id(self, text: str) -> int | None:
        found = self._tokenizer.token_to_id(text)
        return None if found is None else int(found)

    def pieces(self) -> list[str]:
        """Each id's own text, decoded alone (special tokens included): what ``digit_ids`` reads."""
        return [
            str(t)
            for t in self._tokenizer.decode_batch([[i] for i in range(self.vocab_size)], skip_special_tokens=False)
        ]


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise Invalid([f"{path}: not readable JSON ({type(e).__name__}); restore it from the checkpoint"]) from None


def end_ids(folder: Path, tokenizer: HFTokenizer) -> tuple[int, ...]:
    """The end-of-sequence ids the checkpoint names (GENERATION_CONFIG, then TOKENIZER_CONFIG); () when neither does."""
    generation = folder / GENERATION_CONFIG
    if generation.is_file():
        data = _read(generation)
        value = data.get("eos_token_id") if isinstance(data, dict) else None
        ids = value if isinstance(value, list) else [value]
        if value is not None:
            if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < tokenizer.vocab_size for i in ids):
                raise Invalid(
                    [f"{generation}: eos_token_id {value!r} is not ids in [0, {tokenizer.vocab_size}); fix it"]
                )
            return tuple(sorted(set(ids)))
    config = folder / TOKENIZER_CONFIG
    if config.is_file():
        data = _read(config)
        token = data.get("eos_token") if isinstance(data, dict) else None
        text = token.get("content") if isinstance(token, dict) else token
        if isinstance(text, str) and text:
            found = tokenizer.token_id(text)
            if found is None:
                raise Invalid([f"{config}: eos_token {text!r} is not in tokenizer.json; use the model's tokenizer"])
            return (found,)
    return ()


def digit_ids(tokenizer: Tokenizer) -> list[int]:
    """The ids whose text is one or more ASCII digits: byte tokens 48-57, a BPE vocabulary's number tokens."""
    pieces = (
        tokenizer.pieces()
        if isinstance(tokenizer, HFTokenizer)
        else [tokenizer.decode([i]) for i in range(tokenizer.vocab_size)]
    )
    return [i for i, text in enumerate(pieces) if text and text.isascii() and text.isdigit()]


def allowed_mask(vocab: int, ids: list[int]) -> torch.Tensor:
    """(vocab,) bool, True at ``ids``: constrained decoding to those tokens (e.g. the ten digits)."""
    if not ids or any(not 0 <= i < vocab for i in ids):
        raise ValueError(f"allowed tokens must be non-empty ids in [0, {vocab})")
    mask = torch.zeros(vocab, dtype=torch.bool)
    mask[ids] = True
    return mask


DIGITS = [ord(c) for c in "0123456789"]
