"""GRPO in one process, for tests and CPU experiments: rollouts, rewards, advantages, the buffer, the step,
the weight sync, evaluation. Not the run `train.py run.mode=rl` starts (controller.py, policy.py): this loop's
own settings (`Loop`) are what the run takes from run.* and optim.*, and the asynchrony it emulates::

    version v: issue prompts -> generator (weights of version v - staleness) samples G completions each
            -> rewards -> group advantages (zero-std groups dropped) -> buffer
            -> buffer.sample(v, batch) (nothing older than max_policy_age) -> rl_step -> version v + 1
            -> snapshot of the policy (a copy) -> generator.load_weights(snapshot, version)
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import torch

from trainer.config import Model
from trainer.model.transformer import LanguageModel
from trainer.rl.advantages import score
from trainer.rl.buffer import Counters, ReplayBuffer
from trainer.rl.episode import Group, make_batch
from trainer.rl.generate import Generator, TorchGenerator, snapshot
from trainer.rl.grpo import Task, greedy_accuracy, make_task, score_answers
from trainer.rl.loss import Clip
from trainer.rl.settings import RL
from trainer.rl.step import StepSettings, StepStats, rl_step


@dataclass(frozen=True, kw_only=True)
class Loop:
    """The loop's own settings; the defaults are the learning test's (README, "The learning test").

    Not configuration keys: the distributed run takes its steps from run.steps, its optimizer from optim.*
    and its seed from run.seed, and its asynchrony is real (bounded by rl.max_policy_age).
    """

    steps: int = 200
    lr: float = 1e-3  # AdamW, betas 0.9/0.95
    weight_decay: float = 0.0
    grad_clip: float = 1.0  # total gradient norm; 0: off
    seed: int = 0  # the policy's initialization and the generator's sampling (rl.seed orders the prompts)
    staleness: int = 0  # the generator holds the weights of this many versions ago (emulates asynchrony)
    # Rollouts (of prompts_per_step prompts each) one step may take to fill its batch with groups whose
    # rewards differ; past it the loop stops (History.saturated): the prompts are solved.
    max_rollouts: int = 20


@dataclass(frozen=True, kw_only=True)
class Rollout:
    groups: int  # prompts whose groups were scored
    reward_mean: float  # over every completion, dropped groups included
    tokens: int  # response tokens generated
    truncated: int  # completions that ran to max_tokens with no end


def rollout(generator: Generator, buffer: ReplayBuffer, task: Task, settings: RL, count: int) -> Rollout:
    """Issue ``count`` prompts, sample a group for each, score them and hand the groups to the buffer."""
    indices = buffer.issue(count)
    problems = [task.prompts[i] for i in indices]
    encoded = [task.tokenizer.encode(p.prompt) for p in problems]
    completions = generator.generate(
        encoded, settings.group_size, max_tokens=task.max_tokens, temperature=settings.temperature,
        allowed=task.allowed, ends=task.ends,
    )  # fmt: skip
    answers = score_answers(task, problems, completions)
    rewards = answers.rewards
    scored = score(indices, answers.groups, rewards)
    for group in scored.kept:
        buffer.add(group)
    for index in scored.dropped_zero_advantage:
        buffer.drop_zero_advantage(index)
    flat = [r for row in rewards for r in row]
    return Rollout(
        groups=len(indices),
        reward_mean=sum(flat) / len(flat),
        tokens=sum(len(c.response) for group in completions for c in group),
        truncated=answers.truncated,
    )


@dataclass(kw_only=True)
class History:
    rewards: list[float] = field(default_factory=list)  # per training step: mean sampled reward of its rollouts
    ages: list[list[int]] = field(default_factory=list)  # per step: the age of every group trained on
    steps: list[StepStats] = field(default_factory=list)
    truncated: list[int] = field(default_factory=list)  # per step: completions of its rollouts with no end
    greedy: list[tuple[int, float]] = field(default_factory=list)  # (version, held-out greedy accuracy)
    counters: Counters = field(default_factory=Counters)
    reward_failures: int = 0
    saturated: bool = False  # stopped early: max_rollouts rollouts in a row could not fill one batch
    seconds: float = 0.0


class Policy:
    """The trained model and its optimizer, the generator it feeds, and the version counter."""

    def __init__(self, cfg: Model, loop: Loop, device: str | torch.device = "cpu") -> None:
        with torch.random.fork_rng(devices=[]):  # seeded initialization, the caller's RNG state untouched
            torch.manual_seed(loop.seed)
            self.model = LanguageModel(cfg).to(device)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=loop.lr, weight_decay=loop.weight_decay, betas=(0.9, 0.95)
        )
        self.version = 0
        self.generator = TorchGenerator(cfg, seed=loop.seed + 1, device=device)
        self._snapshots = deque([(0, snapshot(self.model))], maxlen=loop.staleness + 1)
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


def step_settings(settings: RL, loop: Loop, task: Task) -> StepSettings:
    return StepSettings(
        clip=Clip(low=settings.clip_low, high=settings.clip_high),
        beta=settings.kl_beta,
        temperature=settings.temperature,
        grad_clip=loop.grad_clip,
        allowed=task.allowed,
    )


def run(
    cfg: Model, settings: RL, task: Task | None = None, device: str | torch.device = "cpu", loop: Loop | None = None
) -> History:
    """``loop.steps`` GRPO steps of a fresh ``cfg`` policy; greedy accuracy every ``eval_every``."""
    loop = loop or Loop()
    if settings.kl_beta > 0:
        raise ValueError("run has no reference model: use rl_step with one for kl_beta > 0")
    if loop.staleness > settings.max_policy_age:
        raise ValueError(
            f"staleness {loop.staleness} > max_policy_age {settings.max_policy_age}: every sample would be evicted"
        )
    started = time.perf_counter()
    task = task or make_task(settings, cfg.vocab)
    policy, buffer, history = (
        Policy(cfg, loop, device),
        ReplayBuffer(max_policy_age=settings.max_policy_age),
        History(),
    )
    step = step_settings(settings, loop, task)
    history.greedy.append((0, greedy_accuracy(policy.model, task.prompts.held_out, task)))
    for _ in range(loop.steps):
        rewards: list[float] = []
        truncated = 0
        while (groups := buffer.sample(policy.version, settings.prompts_per_step)) is None:
            if len(rewards) == loop.max_rollouts:
                break
            # a whole batch of prompts each time: when most groups score alike (the task nearly solved), issuing
            # only the shortfall would take many small rollouts; the surplus waits, at most one version old
            done = rollout(policy.generator, buffer, task, settings, settings.prompts_per_step)
            rewards.append(done.reward_mean)
            truncated += done.truncated
        if groups is None:  # every group scored alike: the training prompts are solved (or hopeless)
            history.saturated = True
            break
        # NaN for a step whose whole batch was the previous step's surplus: it generated nothing
        history.rewards.append(sum(rewards) / len(rewards) if rewards else float("nan"))
        history.truncated.append(truncated)
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
