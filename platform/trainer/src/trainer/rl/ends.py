"""Where a completion ends: at an end-of-sequence id, after a stop string, or at ``max_tokens`` (truncated).

Both engines take and give token ids and stop on end ids themselves (``generate.sample``'s ``ends``; vLLM's
``stop_token_ids``), the id kept as the response's last token. Stop strings (``rl.stop``) are text, and
neither engine sees text: vLLM's ``stop`` needs its detokenizer (``SamplingParams`` refuses stop strings with
``detokenize=False``, vllm-project/vllm ``vllm/sampling_params.py``, ``_verify_args``), and the engines here run
without one. So whoever decodes a response for its reward (the controller, the single-process loop, the
held-out evaluation) finds the first stop string in its text and cuts the response after the token that
completed it; the tokens after it are never trained on and their logprobs never enter the loss. The reward
sees the text before the end: the end-of-sequence token and the stop string excluded (vLLM's default,
``include_stop_str_in_output=False``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from trainer.rl.tokens import Tokenizer


@dataclass(frozen=True, kw_only=True)
class Ending:
    length: int  # response tokens kept: through the end id, or the token that completed a stop string
    text: str  # what the reward sees: the response's text before its end
    truncated: bool  # ran to max_tokens with neither an end id nor a stop string


def _first_stop(text: str, stops: Sequence[str]) -> int | None:
    if not stops:  # the common case, for every completion the controller scores
        return None
    found = [at for at in (text.find(s) for s in stops) if at >= 0]
    return min(found) if found else None


def find_end(
    response: Sequence[int], tokenizer: Tokenizer, *, ends: Collection[int], stops: Sequence[str], max_tokens: int
) -> Ending:
    """Where ``response`` ends, and the text its reward reads."""
    first_end = next((k for k, token in enumerate(response) if token in ends), None)
    body = list(response if first_end is None else response[:first_end])
    text = tokenizer.decode(body)
    at = _first_stop(text, stops)
    if at is None:
        if first_end is not None:
            return Ending(length=first_end + 1, text=text, truncated=False)
        return Ending(length=len(body), text=text, truncated=len(body) >= max_tokens)
    # The shortest prefix whose text holds a stop string, by bisection: a prefix's text is a prefix of the
    # whole text (a split multi-byte character aside), so holding a stop string is monotone in the length.
    # log2(len) decodes, not one per token: a 1,024-token response costs 10.
    low, high = 1, len(body)
    while low < high:
        middle = (low + high) // 2
        if _first_stop(tokenizer.decode(body[:middle]), stops) is None:
            low = middle + 1
        else:
            high = middle
    return Ending(length=low, text=text[:at], truncated=False)
