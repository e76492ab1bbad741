"""GRPO in one process: rollouts, rewards, advantages, the buffer, the step, the weight sync, evaluation.

The pieces are functions over explicit state (a generator, a buffer, a model and its optimizer), so
the distributed controller reuses them with generators in other processes and the step inside the
trainer's commit protocol. ``run`` strings them together for tests and CPU experiments::

    version v: issue prompts -> generator (weights of version v - staleness) samples G completions each
            -> rewards -> group advantages (zero-std groups dropped) -> buffer
            -> buffer.sample(v, batch) (nothing older than max_policy_age) -> rl_step -> version v + 1
            -> snapshot of the policy (a copy) -> generator.load_weights(snapshot, version)
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from trainer.config import Model
from trainer.model import LanguageModel
from trainer.rl.advantages import score
from trainer.rl.buffer import Counters, ReplayBuffer
from trainer.rl.episode import Group, make_batch
from trainer.rl.generate import Generator, TorchGenerator, sample, snapshot
from trainer.rl.loss import Clip
from trainer.rl.prompts import Problem, Prompts, arithmetic_problems, read_jsonl, split
from trainer.rl.rewards import Rewards, resolve
from trainer.rl.settings import RL
from trainer.rl.step import StepSettings, StepStats, rl_step
from trainer.rl.tokens import DIGITS, ByteTokenizer, Tokenizer, allowed_mask


@dataclass(frozen=True, kw_only=True)
class Task:
    """What the policy is asked and how it is scored."""

    prompts: Prompts
    tokenizer: Tokenizer
    rewards: Rewards
    allowed: torch.Tensor | None  # (V,) bool or None
    max_tokens: int
    stop: int | None = None


def make_task(settings: RL, vocab: int, tokenizer: Tokenizer | None = None) -> Task:
    problems = arithmetic_problems() if settings.task == "arithmetic" else read_jsonl(settings.task)
    return Task(
        prompts=split(problems, settings.held_out, settings.seed),
        tokenizer=tokenizer or ByteTokenizer(),
        rewards=Rewards(resolve(settings.reward)),
        allowed=allowed_mask(vocab, DIGITS) if settings.allowed == "digits" else None,
        max_tokens=settings.max_tokens,
    )


@dataclass(frozen=True, kw_only=True)
class Rollout:
    groups: int  # prompts whose groups were scored
    reward_mean: float  # over every completion, dropped groups included
    tokens: int  # response tokens generated


def rollout(generator: Generator, buffer: ReplayBuffer, task: Task, settings: RL, count: int) -> Rollout:
    """Issue ``count`` prompts, sample a group for each, score them and hand the groups to the buffer."""
    indices = buffer.issue(count)
    problems = [task.prompts[i] for i in indices]
    encoded = [task.tokenizer.encode(p.prompt) for p in problems]
    completions = generator.generate(
        encoded, settings.group_size, max_tokens=task.max_tokens, temperature=settings.temperature,
        allowed=task.allowed, stop=task.stop,
    )  # fmt: skip
    rewards = [
        [task.rewards(p.prompt, task.tokenizer.decode(list(c.response)), p.answer) for c in group]
        for p, group in zip(problems, completions, strict=True)
    ]
    scored = score(indices, completions, rewards)
    for group in scored.kept:
        buffer.add(group)
    for index in scored.dropped_zero_advantage:
        buffer.drop_zero_advantage(index)
    flat = [r for row in rewards for r in row]
    return Rollout(
        groups=len(indices),
        reward_mean=sum(flat) / len(flat),
        tokens=sum(len(c.response) for group in completions for c in group),
    )


@torch.no_grad()
def greedy_accuracy(model: torch.nn.Module, problems: Sequence[Problem], task: Task) -> float:
    """The share of ``problems`` whose greedy (argmax, masked) answer scores 1."""
    if not problems:
        return float("nan")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    by_length: dict[int, list[Problem]] = {}
    for p in problems:
        by_length.setdefault(len(task.tokenizer.encode(p.prompt)), []).append(p)
    correct = 0.0
    for group in by_length.values():
        prompts = torch.tensor([task.tokenizer.encode(p.prompt) for p in group], device=device)
        drawn = sample(model, prompts, max_tokens=task.max_tokens, temperature=0.0, allowed=task.allowed, rng=None,
                       stop=task.stop)  # fmt: skip
        for p, tokens, length in zip(group, drawn.tokens.tolist(), drawn.lengths.tolist(), strict=True):
            correct += task.rewards(p.prompt, task.tokenizer.decode(tokens[:length]), p.answer) >= 1.0
    model.train(was_training)
    return correct / len(problems)


@dataclass(kw_only=True)
class History:
    rewards: list[float] = field(default_factory=list)  # per training step: mean sampled reward of its rollouts
    ages: list[list[int]] = field(default_factory=list)  # per step: the age of every group trained on
    steps: list[StepStats] = field(default_factory=list)
    greedy: list[tuple[int, float]] = field(default_factory=list)  # (version, held-out greedy accuracy)
    counters: Counters = field(default_factory=Counters)
    reward_failures: int = 0
    saturated: bool = False  # stopped early: max_rollouts rollouts in a row could not fill one batch
    seconds: float = 0.0


class Policy:
    """The trained model and its optimizer, the generator it feeds, and the version counter."""

    def __init__(self, cfg: Model, settings: RL, device: str | torch.device = "cpu") -> None:
        with torch.random.fork_rng(devices=[]):  # seeded initialization, the caller's RNG state untouched
            torch.manual_seed(settings.seed)
            self.model = LanguageModel(cfg).to(device)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay, betas=(0.9, 0.95)
        )
        self.version = 0
        self.generator = TorchGenerator(cfg, seed=settings.seed + 1, device=device)
        self._snapshots = deque([(0, snapshot(self.model))], maxlen=settings.staleness + 1)
        self.generator.load_weights(self._snapshots[0][1], 0)

    def train(self, groups: list[Group], step: StepSettings) -> StepStats:
        """One rl_step, then the new version's snapshot goes to the generator (``staleness`` versions late)."""
        stats = rl_step(self.model, self.optimizer, make_batch(groups), step)
        self.version += 1
        self._snapshots.append((self.version, snapshot(self.model)))
        version, weights = self._snapshots[0]  # the oldest kept: `staleness` versions behind, once there are
        if version != self.generator.version:
            self.generator.load_weights(weights, version)
        return stats


def step_settings(settings: RL, task: Task) -> StepSettings:
    return StepSettings(
        clip=Clip(low=settings.clip_low, high=settings.clip_high),
        beta=settings.kl_beta,
        temperature=settings.temperature,
        grad_clip=settings.grad_clip,
        allowed=task.allowed,
    )


def run(cfg: Model, settings: RL, task: Task | None = None, device: str | torch.device = "cpu") -> History:
    """``settings.steps`` GRPO steps of a fresh ``cfg`` policy; greedy accuracy every ``eval_every``."""
    if settings.kl_beta > 0:
        raise ValueError("run has no reference model: use rl_step with one for kl_beta > 0")
    started = time.perf_counter()
    task = task or make_task(settings, cfg.vocab)
    policy, buffer, history = (
        Policy(cfg, settings, device),
        ReplayBuffer(max_policy_age=settings.max_policy_age),
        History(),
    )
    step = step_settings(settings, task)
    history.greedy.append((0, greedy_accuracy(policy.model, task.prompts.held_out, task)))
    for _ in range(settings.steps):
        rewards: list[float] = []
        while (groups := buffer.sample(policy.version, settings.prompts_per_step)) is None:
            if len(rewards) == settings.max_rollouts:
                break
            # a whole batch of prompts each time: when most groups score alike (the task nearly solved), issuing
            # only the shortfall would take many small rollouts; the surplus waits, at most one version old
            done = rollout(policy.generator, buffer, task, settings, settings.prompts_per_step)
            rewards.append(done.reward_mean)
        if groups is None:  # every group scored alike: the training prompts are solved (or hopeless)
            history.saturated = True
            break
        # NaN for a step whose whole batch was the previous step's surplus: it generated nothing
        history.rewards.append(sum(rewards) / len(rewards) if rewards else float("nan"))
        history.ages.append([g.age(policy.version) for g in groups])
        history.steps.append(policy.train(groups, step))
        buffer.trained(groups)
        if policy.version % settings.eval_every == 0:
            history.greedy.append((policy.version, greedy_accuracy(policy.model, task.prompts.held_out, task)))
    if history.greedy[-1][0] != policy.version:
        history.greedy.append((policy.version, greedy_accuracy(policy.model, task.prompts.held_out, task)))
    history.counters, history.reward_failures = buffer.counters, task.rewards.failures
    history.seconds = time.perf_counter() - started
    return history
