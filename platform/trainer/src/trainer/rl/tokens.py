"""Text to token ids and back: byte tokens (the trainer's text data: id = byte value) or a Hugging Face tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import torch


class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes, one token each (vocab 256), as data/batches.py's text batches."""

    def encode(self, text: str) -> list[int]:
        return list(text.encode())

    def decode(self, ids: list[int]) -> str:
        # A sampled id can be any vocab entry: ids past 255 and broken UTF-8 decode to U+FFFD, never raise.
        return bytes(i if 0 <= i < 256 else ord("?") for i in ids).decode(errors="replace")


class HFTokenizer:
    """A ``tokenizer.json`` through the ``tokenizers`` library, without special tokens added."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer as Fast  # imported here: byte-token runs never need it

        self._tokenizer = Fast.from_file(str(path))

    @property
    def vocab_size(self) -> int:
        return int(self._tokenizer.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return str(self._tokenizer.decode(ids, skip_special_tokens=True))


def allowed_mask(vocab: int, ids: list[int]) -> torch.Tensor:
    """(vocab,) bool, True at ``ids``: constrained decoding to those tokens (e.g. the ten digits)."""
    if not ids or any(not 0 <= i < vocab for i in ids):
        raise ValueError(f"allowed tokens must be non-empty ids in [0, {vocab})")
    mask = torch.zeros(vocab, dtype=torch.bool)
    mask[ids] = True
    return mask


DIGITS = [ord(c) for c in "0123456789"]
