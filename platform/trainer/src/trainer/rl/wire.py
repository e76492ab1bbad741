"""What the controller, the generators and the trainer groups send each other, as JSON, checked on arrival.

A generator's answer is input from another process: every field is checked against what the run's engines
(TorchGenerator and vLLM, ``Bounds``) can write for that lease: one group of ``n`` completions per leased
prompt, only allowed token ids, exactly ``max_tokens`` of them unless an end-of-sequence id (last, never before) or
vLLM's context ends a completion, one log-probability per token that a float32 softmax could have sampled,
and the version the generator held when it asked. Anything else is ``Refused`` with a reason (the
refused-answers metric's label) before anything is scored; the controller counts it by generator and the
generator is told why; the run goes on. The prompt tokens of a completion are the controller's own (the
lease's), never the generator's copy. Batches go the other way, from the controller, and are rebuilt
through the episode types, which check their own invariants.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contract.metrics import REFUSAL_REASONS
from contract.problem import Invalid
from trainer.rl.episode import Completion, Group

# The lowest log-probability a sampled token may claim: float32's smallest normal number, 2**-126. A token
# whose probability is below it is not one a float32 or bf16 softmax samples (bf16 has float32's exponent
# range), and above it the importance ratio exp(new - old) of a token the policy now gives probability
# up to 1 stays below float32's largest number (exp(87.3) = 2**126 < 3.4e38): a claimed -1e30 made every
# GRPO step on it non-finite (issue 39).
MIN_LOGPROB = math.log(2.0**-126)  # -87.34


def group_to_json(group: Group) -> dict[str, Any]:
    """A group as the trainer groups get it: its prompt once, not once per completion (16x at group_size 16)."""
    prompt = group.completions[0].prompt
    if any(c.prompt != prompt for c in group.completions):
        raise ValueError(f"group of prompt {group.prompt_index}: its completions answer different prompts")
    return {
        "index": group.prompt_index,
        "prompt": list(prompt),
        "rewards": list(group.rewards),
        "advantages": list(group.advantages),
        "completions": [
            {"response": list(c.response), "logprobs": list(c.logprobs), "version": c.version}
            for c in group.completions
        ],
    }


@dataclass(frozen=True)
class Sent:
    """A step's batch as the controller sent it. Every group gets every group of the batch, and the loss weighs
    each share against the whole (loss.Aggregation): the whole batch's counts are read at once, but a group is
    rebuilt (``group_from_json``) only by the rank that trains it, half the batch or less of each."""

    groups: list[Any]
    sequences: int  # completions in the batch
    tokens: int  # their response tokens


def sent_batch(groups: Any) -> Sent:
    """The controller's ``groups`` with the counts the loss needs; Invalid when they cannot be counted."""
    try:
        completions = [c for g in groups for c in g["completions"]]
        return Sent(
            groups=list(groups), sequences=len(completions), tokens=sum(len(c["response"]) for c in completions)
        )
    except (KeyError, TypeError) as error:
        raise Invalid(
            [f"batch from the controller: a group is malformed ({error}); the controller is not ours"]
        ) from None


def group_from_json(data: Any) -> Group:
    """A group the controller sent (trusted, but rebuilt through the checked types)."""
    try:
        prompt = tuple(int(t) for t in data["prompt"])
        return Group(
            prompt_index=int(data["index"]),
            rewards=tuple(float(r) for r in data["rewards"]),
            advantages=tuple(float(a) for a in data["advantages"]),
            completions=tuple(
                Completion(
                    prompt=prompt,
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


class Refused(Invalid):
    """A generator's answer refused: one line, and why (a ``contract.metrics.REFUSAL_REASONS`` label).

    The controller fills in ``generator`` (the name its series is counted under) and ``count`` (that
    generator's refusals so far), for the service's log line and metric and the reply the generator logs.
    """

    def __init__(self, reason: str, line: str, *, generator: str = "", count: int = 0) -> None:
        if reason not in REFUSAL_REASONS:
            raise ValueError(f"refusal reason {reason!r} is not one of {', '.join(REFUSAL_REASONS)}")
        super().__init__([line])
        self.reason, self.generator, self.count = reason, generator, count


@dataclass(frozen=True, kw_only=True)
class Bounds:
    """What the run's engines can answer to one lease: TorchGenerator (generate.sample) and vLLM alike.

    Both sample only ``allowed`` tokens (a -inf mask; vLLM's ``allowed_token_ids``), write ``max_tokens``
    of them unless one of ``ends`` does (the tokenizer's end-of-sequence ids: vLLM's ``stop_token_ids``, its own
    EOS ignored) or, in vLLM only, the context does (its scheduler finishes a request at ``max_model_len``, the exported ``seq_len``), and
    stamp every completion of one call with the version the engine holds, the one its lease ask carried.
    vLLM's stop rule: vllm-project/vllm ``vllm/v1/core/sched/utils.py`` ``check_stop`` (length-capped at
    ``num_tokens >= max_model_len`` or ``num_output_tokens >= max_tokens``; EOS only without ``ignore_eos``;
    stopped when the last output token is in ``stop_token_ids``); TorchGenerator's: ``generate.sample``.
    """

    n: int  # completions per prompt (rl.group_size)
    max_tokens: int
    vocab: int
    allowed: frozenset[int] | None = None  # None: the whole vocabulary
    ends: frozenset[int] = frozenset()  # end-of-sequence ids: a completion ends on one, kept as its last token
    context: int | None = None  # vLLM's max_model_len; None: no engine of the run stops there
    held: int  # the version the generator held when it was leased
    newest: int  # the newest policy version that exists

    def lengths(self, prompt: int) -> tuple[int, int]:
        """The response lengths an engine can write after a prompt of ``prompt`` tokens."""
        if self.ends:
            return 1, self.max_tokens
        if self.context is not None:
            return max(1, min(self.max_tokens, self.context - prompt)), self.max_tokens
        return self.max_tokens, self.max_tokens


def completions_from_result(
    data: Any, prompts: Mapping[int, Sequence[int]], bounds: Bounds
) -> dict[int, list[Completion]]:
    """A generator's answer to a lease of ``prompts`` (index -> prompt tokens): index -> its ``n`` completions.

    Refused (``Refused``, with its reason) unless every field is one the run's engines could have written.
    """
    groups = _field(data, "groups", list)
    if len(groups) != len(prompts):
        raise Refused("shape", f"result: {len(groups)} groups for a lease of {len(prompts)} prompts")
    out: dict[int, list[Completion]] = {}
    for i, group in enumerate(groups):
        index = _field(group, "index", int, f"groups[{i}]")
        if index not in prompts or index in out:
            raise Refused(
                "shape", f"result: groups[{i}]: prompt {index} was not leased to this generator or is repeated"
            )
        completions = _field(group, "completions", list, f"groups[{i}]")
        if len(completions) != bounds.n:
            raise Refused(
                "shape", f"result: groups[{i}]: {len(completions)} completions, the run samples {bounds.n} per prompt"
            )
        out[index] = [
            _completion(c, prompts[index], f"groups[{i}].completions[{j}]", bounds) for j, c in enumerate(completions)
        ]
    return out


def _completion(data: Any, prompt: Sequence[int], where: str, b: Bounds) -> Completion:
    response = _field(data, "response", list, where)
    logprobs = _field(data, "logprobs", list, where)
    version = _field(data, "version", int, where)
    _length(response, len(prompt), where, b)
    if len(logprobs) != len(response):
        raise Refused("logprob", f"result: {where}: {len(logprobs)} logprobs for {len(response)} tokens (one each)")
    if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < b.vocab for t in response):
        raise Refused("token", f"result: {where}: a token id outside [0, {b.vocab})")
    if b.allowed is not None and not b.allowed.issuperset(response):
        raise Refused(
            "token", f"result: {where}: a token id outside the allowed tokens (rl.allowed), which no engine samples"
        )
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and MIN_LOGPROB <= x <= 0 for x in logprobs):
        raise Refused(
            "logprob", f"result: {where}: a logprob outside [{MIN_LOGPROB:.2f}, 0] (a sampled token's, in float32)"
        )
    if not 0 <= version <= b.newest:
        raise Refused("version", f"result: {where}: policy version {version} does not exist (0..{b.newest})")
    if version != b.held:
        raise Refused(
            "version",
            f"result: {where}: policy version {version}; it held version {b.held} when leased (one call, one version)",
        )
    return Completion(
        prompt=tuple(prompt), response=tuple(response), logprobs=tuple(map(float, logprobs)), version=version
    )


def _length(response: list[Any], prompt: int, where: str, b: Bounds) -> None:
    """A response length the engines write after ``prompt`` tokens, with an end id only at its end.

    A response shorter than ``max_tokens`` ends on an end id, or where vLLM's context ran out: an answer that
    stops early on its own would be trained on as if the policy had chosen to end there."""
    low, high = b.lengths(prompt)
    if not low <= len(response) <= high:
        raise Refused("length", f"result: {where}: {len(response)} tokens; the engines write {low}..{high} here")
    if not b.ends:
        return
    inside = next((t for t in response[:-1] if t in b.ends), None)
    if inside is not None:
        raise Refused("length", f"result: {where}: the end token {inside} before the end (generation ends at it)")
    capped = b.context is not None and prompt + len(response) >= b.context
    if len(response) < high and response[-1] not in b.ends and not capped:
        raise Refused(
            "length", f"result: {where}: {len(response)} tokens, fewer than {high}, not ended by an end token"
        )


def _field(data: Any, name: str, kind: type, where: str = "") -> Any:
    value = data.get(name) if isinstance(data, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool):
        at = f"{where}." if where else ""
        raise Refused("shape", f"result: {at}{name}: expected {kind.__name__}, got {type(value).__name__}")
    return value
