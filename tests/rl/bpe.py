"""A small BPE tokenizer trained here with ``tokenizers`` on a task's text, saved as a checkpoint folder would hold
it (tokenizer.json and tokenizer_config.json naming its end-of-sequence token): a real tokenizer for CPU tests."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from trainer.rl.prompts import Problem

EOS = "<eos>"


def train_bpe(problems: Sequence[Problem], folder: Path, vocab_size: int = 32) -> Path:
    """Byte-level BPE (GPT-2's and Llama 3's kind) over ``prompt + answer`` lines, EOS first (id 0).

    No regex split: merges may span digits and signs (``0+0``, ``=1``), as a tokenizer trained on other text would
    have them. The alphabet is the bytes the text holds, so the vocabulary stays ``vocab_size`` small."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], show_progress=False)
    tokenizer.train_from_iterator([p.prompt + p.answer for p in problems], trainer=trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": EOS}))
    return folder


def digit_sums(max_sum: int = 18, writings: bool = True) -> tuple[Problem, ...]:
    """``a+b=`` for digits a, b with a + b <= ``max_sum``: answers of one or two digit tokens, then the end of sequence.

    ``writings``: each sum four ways, either operand with or without a leading zero, as prompts.arithmetic_problems
    (400 prompts): held-out prompts are writings of sums trained on, not unseen sums.
    """
    widths = ((1, 1), (2, 1), (1, 2), (2, 2)) if writings else ((1, 1),)
    return tuple(
        Problem(prompt=f"{a:0{wa}d}+{b:0{wb}d}=", answer=str(a + b))
        for a in range(10)
        for b in range(10)
        if a + b <= max_sum
        for wa, wb in widths
    )
