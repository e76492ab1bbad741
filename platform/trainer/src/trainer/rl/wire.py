"""What the controller, the generators and the trainer groups send each other, as JSON, checked on arrival.

A generator's answer is input from another process: every field is checked (the lease it answers, one
group of ``n`` completions per leased prompt, token ids inside the vocabulary, at most ``max_tokens``
of them, log-probabilities a float32 softmax could have sampled) before anything is scored, and a bad answer
is one ``Invalid`` line for the controller's log; the run goes on. The prompt tokens of a completion are
the controller's own (the lease's), never the generator's copy. Batches go the other way, from the
controller, and are rebuilt through the episode types, which check their own invariants.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from contract.problem import Invalid
from trainer.rl.episode import Completion, Group

# The lowest log-probability a sampled token may claim: float32's smallest normal number, 2**-126. A token
# whose probability is below it is not one a float32 or bf16 softmax samples (bf16 has float32's exponent
# range), and above it the importance ratio exp(new - old) of a token the policy now gives probability
# up to 1 stays below float32's largest number (exp(87.3) = 2**126 < 3.4e38): a claimed -1e30 made every
# GRPO step on it non-finite (issue 39).
MIN_LOGPROB = math.log(2.0**-126)  # -87.34


def group_to_json(group: Group) -> dict[str, Any]:
    return {
        "index": group.prompt_index,
        "rewards": list(group.rewards),
        "advantages": list(group.advantages),
        "completions": [
            {"prompt": list(c.prompt), "response": list(c.response), "logprobs": list(c.logprobs), "version": c.version}
            for c in group.completions
        ],
    }


def group_from_json(data: Any) -> Group:
    """A group the controller sent (trusted, but rebuilt through the checked types)."""
    try:
        return Group(
            prompt_index=int(data["index"]),
            rewards=tuple(float(r) for r in data["rewards"]),
            advantages=tuple(float(a) for a in data["advantages"]),
            completions=tuple(
                Completion(
                    prompt=tuple(int(t) for t in c["prompt"]),
                    response=tuple(int(t) for t in c["response"]),
                    logprobs=tuple(float(x) for x in c["logprobs"]),
                    version=int(c["version"]),
                )
                for c in data["completions"]
            ),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise Invalid(
            [f"batch from the controller: a group is malformed ({error}); the controller is not ours"]
        ) from None


def completions_from_result(
    data: Any, prompts: Mapping[int, Sequence[int]], *, n: int, max_tokens: int, vocab: int, newest: int
) -> dict[int, list[Completion]]:
    """A generator's answer to a lease of ``prompts`` (index -> prompt tokens): index -> its ``n`` completions.

    ``newest``: the newest policy version that exists; a completion claiming a later one is forged.
    """
    groups = _field(data, "groups", list)
    if len(groups) != len(prompts):
        raise Invalid([f"result: {len(groups)} groups for a lease of {len(prompts)} prompts"])
    out: dict[int, list[Completion]] = {}
    for i, group in enumerate(groups):
        index = _field(group, "index", int, f"groups[{i}]")
        if index not in prompts or index in out:
            raise Invalid([f"result: groups[{i}]: prompt {index} was not leased to this generator or is repeated"])
        completions = _field(group, "completions", list, f"groups[{i}]")
        if len(completions) != n:
            raise Invalid([f"result: groups[{i}]: {len(completions)} completions, the run samples {n} per prompt"])
        out[index] = [
            _completion(c, prompts[index], f"groups[{i}].completions[{j}]", max_tokens, vocab, newest)
            for j, c in enumerate(completions)
        ]
    return out


def _completion(data: Any, prompt: Sequence[int], where: str, max_tokens: int, vocab: int, newest: int) -> Completion:
    response = _field(data, "response", list, where)
    logprobs = _field(data, "logprobs", list, where)
    version = _field(data, "version", int, where)
    if not 1 <= len(response) <= max_tokens or len(logprobs) != len(response):
        raise Invalid([f"result: {where}: {len(response)} tokens, {len(logprobs)} logprobs (1..{max_tokens}, equal)"])
    if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab for t in response):
        raise Invalid([f"result: {where}: a token id outside [0, {vocab})"])
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and MIN_LOGPROB <= x <= 0 for x in logprobs):
        raise Invalid([f"result: {where}: a logprob outside [{MIN_LOGPROB:.2f}, 0] (a sampled token's, in float32)"])
    if not 0 <= version <= newest:
        raise Invalid([f"result: {where}: policy version {version} does not exist (0..{newest})"])
    return Completion(
        prompt=tuple(prompt), response=tuple(response), logprobs=tuple(map(float, logprobs)), version=version
    )


def _field(data: Any, name: str, kind: type, where: str = "") -> Any:
    value = data.get(name) if isinstance(data, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool):
        at = f"{where}." if where else ""
        raise Invalid([f"result: {at}{name}: expected {kind.__name__}, got {type(value).__name__}"])
    return value
