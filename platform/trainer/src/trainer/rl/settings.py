"""The RL run's settings (configs/rl/*.yaml): typed, bounded, refused in one line when wrong.

Each key is read by the run `train.py run.mode=rl` starts (controller, trainer groups, generators), which
`train.py --help` lists them for; its steps, optimizer and model seed are run.steps, optim.* and run.seed, as in
pretraining. tests/rl/test_settings.py fails when a key here is not read by that run (issue 40: rl.steps, rl.lr
and four more were read only by the single-process loop, loop.py, whose own settings are loop.Loop).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from contract import codec, names
from contract.codec import setting
from contract.problem import Invalid

# How per-token losses become the step's scalar (loss.Aggregation; verl's ``loss_agg_mode`` names,
# verl/trainer/ppo/core_algos.py ``agg_loss``): GRPO's, DAPO's (arXiv:2503.14476), Dr. GRPO's (arXiv:2503.20783).
SEQUENCE_MEAN, TOKEN_MEAN, TOKEN_SUM_NORM = "seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"
LOSS_AGGS = (SEQUENCE_MEAN, TOKEN_MEAN, TOKEN_SUM_NORM)

# Upper bounds: a typo of a few digits (a billion prompts a step) is one line at start, not an OOM later.
MANY = 100_000_000
DAY_S = 86_400.0


@dataclass(frozen=True, kw_only=True)
class RL:
    # What to learn: "arithmetic" (a+b= with a+b <= 9, byte tokens) or a JSONL path/URL of {"prompt", "answer"}.
    task: str = "arithmetic"
    reward: str = "exact"  # exact, math, or module:function (rewards.py)
    held_out: int = setting(44, low=0, high=MANY)  # problems kept out of training for greedy evaluation
    # Constrained decoding: "digits" (the tokens whose text is digits, and the tokenizer's end-of-sequence) or ""
    # (the whole vocabulary).
    allowed: str = "digits"
    group_size: int = setting(16, low=2, high=4096)  # completions per prompt: GRPO's baseline is the group's own mean
    prompts_per_step: int = setting(32, low=1, high=MANY)  # groups in one training batch
    max_tokens: int = setting(1, low=1, high=1 << 20)  # a completion with no end by then is cut there (truncated)
    # Strings that end a completion besides the tokenizer's end-of-sequence: the response is cut after the
    # token that completes the first one, which the reward does not see (ends.py).
    stop: tuple[str, ...] = ()
    temperature: float = setting(1.0, above=0, high=100.0)
    max_policy_age: int = setting(1, low=0, high=1000)  # a sample older than this many versions is never trained on
    clip_low: float = setting(0.2, low=0, below=1)
    clip_high: float = setting(0.2, low=0, high=100.0)
    # Where A < 0 the loss stops growing at this ratio (dual-clip PPO; verl's clip_ratio_c): a bound on what one
    # token a generator claims improbable can do to a step.
    clip_dual: float = setting(3.0, above=1, high=1e6)
    # How the step's per-token losses are summed (loss.Aggregation; verl's loss_agg_mode names): seq-mean-token-mean
    # (GRPO, a mean per completion), token-mean (DAPO) or seq-mean-token-sum-norm (Dr. GRPO, over max_tokens).
    loss_agg: str = SEQUENCE_MEAN
    advantage_std: bool = True  # divide each group's advantages by its reward std (GRPO); false: Dr. GRPO's
    kl_beta: float = setting(0.0, low=0, high=100.0)  # 0: no reference model, no reference forward
    eval_every: int = setting(25, low=1, high=MANY)  # held-out greedy accuracy every this many steps (and the last)
    # The training prompts' order, as data.seed is pretraining's batches' (prompts.py: a pure function of
    # (seed, index)); the model's initialization and the generators' sampling take run.seed.
    seed: int = setting(0, low=0, high=(1 << 32) - 1)
    generators: int = setting(2, low=1, high=65536)  # generator processes (pods in a cluster), each one engine
    lease_prompts: int = setting(8, low=1, high=MANY)  # prompts a generator takes at a time
    lease_timeout_s: float = setting(120.0, above=0, high=DAY_S)  # a lease not answered by then is issued again
    sync_timeout_s: float = setting(30.0, above=0, high=DAY_S)  # one weight transfer, trainer -> one generator
    # The weight sync's bucket (whole tensors, in the wire dtype): the most a generator holds beyond its weights,
    # and each trainer rank beyond its shard, during a sync (README, "Memory"); 1 GiB holds 8B's largest tensor.
    sync_bucket_mb: int = setting(1024, low=1, high=1 << 20)
    buffer_batches: int = setting(2, low=1, high=1000)  # at most this many batches ready or in flight (pacing.py)
    # Rollouts of prompts_per_step prompts a step may score without filling its batch with groups whose rewards
    # differ; then the run stops, saying so (controller.py; the single-process loop's History.saturated). 20: the
    # learning test's runs fill a batch within 2 rollouts until the prompts are solved (rl/README.md).
    max_rollouts: int = setting(20, low=1, high=MANY)
    # A generator that exits this many times in a row without an answer the controller kept stops the run, with
    # its last error line (launch.py). 3, as a replica group's restarts (ft.max_restarts): a generator
    # holds no state, so a crash that repeats at once is a bug or a broken image, not a fault to ride out.
    max_restarts: int = setting(3, low=0, high=1000)
    hf_checkpoint: str = ""  # a Hugging Face folder (or gs:// URL) to start from; "": the seeded init
    controller: str = ""  # the controller's http://host:port for processes started elsewhere (launcher sets it)
    # The generators' engine (contract.names.RL_ENGINES): "torch" (the trainer's model on one device, CPU or CUDA:
    # $MERIDIAN_TP above 1 is refused at start, preconditions.py) or "vllm" (the generator image, GPU; tensor
    # parallel per engine from $MERIDIAN_TP).
    engine: str = names.TORCH_ENGINE
    gpu_memory_utilization: float = setting(0.85, above=0, below=1)  # vLLM's share of each GPU (weights + KV)


# Keys the single-process loop had and the distributed run takes from elsewhere (issue 40 removed them): an
# override of one is refused in one line naming the key that does it (config.compose), never silently ignored.
MOVED = {
    "rl.lr": "the RL step's learning rate is optim.lr",
    "rl.steps": "the run's policy updates are run.steps",
    "rl.weight_decay": "the RL step's weight decay is optim.weight_decay",
    "rl.grad_clip": "the RL step's gradient clip is optim.grad_clip",
    "rl.staleness": "the generators' lag is real here, and rl.max_policy_age bounds it",
}
# What `train.py --help` says under its table about the keys an RL run reads (cli.usage).
HELP = (
    "run.mode=rl (trainer/rl/README.md) reads run.steps (policy updates), optim.lr, optim.weight_decay and "
    "optim.grad_clip (its optimizer), run.seed (the model's initialization and the generators' sampling) and the "
    "rl.* keys; rl.seed orders the training prompts only. There is no rl.lr, rl.steps, rl.weight_decay, "
    "rl.grad_clip or rl.staleness."
)


_ADDRESS = re.compile(r"http://[A-Za-z0-9.\-]{1,253}:[0-9]{1,5}")


def _fix(path: str, kind: str) -> str:
    return f"set {path} to one of them" if kind.startswith("one of") else f"set {path}=<{kind}>"


def from_dict(data: Any, where: str = "rl") -> RL:
    return check(codec.from_data(RL, data, where, fix=_fix), where)


def check(settings: RL, where: str = "rl") -> RL:
    """The rules between fields (Invalid, one line); the trainer's configuration applies them too."""
    if settings.controller and not _ADDRESS.fullmatch(settings.controller):
        raise Invalid(
            [f"{where}.controller: {settings.controller[:80]!r} is not http://host:port; fix it or leave it empty"]
        )
    if settings.allowed not in ("digits", ""):
        raise Invalid([f"{where}: allowed: {settings.allowed!r} is not a token set; set allowed to digits or ''"])
    if any(not s for s in settings.stop):
        raise Invalid([f"{where}.stop: an empty string ends every completion at once; remove it"])
    if settings.allowed == "digits" and any(not (s.isascii() and s.isdigit()) for s in settings.stop):
        odd = next(s for s in settings.stop if not (s.isascii() and s.isdigit()))
        raise Invalid(
            [f"{where}.stop: {odd[:40]!r} is never sampled with allowed=digits; remove it or set {where}.allowed=''"]
        )
    if settings.loss_agg not in LOSS_AGGS:
        choices = f"{', '.join(LOSS_AGGS[:-1])} or {LOSS_AGGS[-1]}"
        raise Invalid(
            [
                f"{where}.loss_agg: {settings.loss_agg[:40]!r} is not a loss aggregation; set {where}.loss_agg to {choices}"
            ]
        )
    if settings.engine not in names.RL_ENGINES:
        engines = " or ".join(names.RL_ENGINES)
        raise Invalid([f"{where}.engine: {settings.engine[:40]!r} is not an engine; set {where}.engine to {engines}"])
    return settings
