"""The RL run's controller: prompts to generators, scored groups to the trainer groups, weights routed back.

One per run (the local launcher's process; a cluster's head). It owns the replay buffer (buffer.py) and
decides, per request, with no I/O of its own (service.py serves it over HTTP, one lock around it):

* a generator asks for work (``lease``) holding policy version ``v``: if a newer version exists and a
  trainer group holds a snapshot of it, the answer is a weight transfer (a pair id; the group's weight
  server sends, pairs.py); if ``v`` is older than the age bound allows, or ``rl.buffer_batches`` batches
  already wait, it waits; otherwise it gets ``rl.lease_prompts`` prompts;
* a generator's answer (``result``) is checked (wire.py), scored (rewards, group advantages) and buffered;
* a trainer group asks for the batch of step ``s`` (``batch``): the first ask forms it from the buffer,
  nothing older than ``max_policy_age``, and every later ask (the other groups, a retry) gets the same
  one, with the buffer's state as it will be once the step commits: what the group's checkpoint holds;
* a trainer group reports a commit (``committed``): the buffer marks the batch trained, the version
  moves on, and the group serves that version from the snapshot it took (every group does: a generator
  is synced from the lowest group holding the newest); the step's first report is told to evaluate it.

A step whose batch cannot be formed stops the run (``stopped``, one line saying why) once
``rl.max_rollouts`` rollouts of ``rl.prompts_per_step`` prompts were scored since the last batch without
filling one with groups whose rewards differ: the single-process loop's ``History.saturated``. Until then
``waiting`` says, once per step after ``WAIT_NOTICE_S``, what the step waits for.

A dead generator (``generator_gone``, or a lease past ``rl.lease_timeout_s``) has its prompts issued
again; a dead trainer group (``group_gone``) stops being asked for weights. A fresh controller waits for
the first trainer group's ``start``, which brings the buffer state of the checkpoint it resumed from.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from contract.problem import Invalid
from trainer.rl.advantages import score
from trainer.rl.buffer import ReplayBuffer
from trainer.rl.episode import Completion, Group
from trainer.rl.grpo import Task, score_answers
from trainer.rl.pacing import KeptShare, leasable, room
from trainer.rl.settings import RL
from trainer.rl.stats import Lengths, PolicyStats, Tally, lengths, summarize
from trainer.rl.wire import Bounds, Refused, completions_from_result, group_to_json

WAIT_S = 0.2  # how long a generator waits before asking again
WAIT_NOTICE_S = 10.0  # a step that waits this long for its batch says so on the console, once
OTHER = "other"  # the series a refused answer from a name that never asked for work is counted under


@dataclass(kw_only=True)
class Lease:
    owner: str
    prompts: dict[int, list[int]]  # index -> prompt tokens
    deadline: float
    held: int  # the version the generator held when it asked: the one its engine stamps on the answer


@dataclass(frozen=True, kw_only=True)
class Formed:
    """A step's batch, fixed at its first ask: every group and every retry of the step trains on it."""

    groups: list[Group]
    state: str  # the buffer's state_dict (JSON) as it is once this batch is trained
    sent: list[dict[str, Any]]  # the groups as every trainer group gets them (wire.group_to_json, made once)


@dataclass(kw_only=True)
class Window:
    """What happened since the last committed step: the console line's and the metrics' numbers."""

    generated_tokens: int = 0
    generate_seconds: float = 0.0
    reissued: int = 0
    refused: int = 0  # generator answers refused (wire.Refused)
    completions: int = 0  # completions scored
    truncated: int = 0  # of them, those that ran to max_tokens with no end (ends.py)
    rewards: list[float] = field(default_factory=list)  # every scored completion's reward


@dataclass(frozen=True, kw_only=True)
class Committed:
    """A committed step, once every group that trained a share of it reported: for the console and the metrics."""

    step: int  # the new policy version
    ages: tuple[int, ...]
    reward: float  # mean reward of the trained groups' completions
    window: Window
    trainer: dict[str, Any]  # what the first reporting group measured (policy.py's after_commit stats)
    lengths: Lengths  # the whole batch's response lengths, truncation and tokens (every group trained a share)
    policy: PolicyStats | None = None  # the groups' tallies merged: clip fraction, ratio, entropy, KL


@dataclass(kw_only=True)
class Reporting:
    """A committed step whose groups are still reporting: its statistics are over all of their shares."""

    committed: Committed
    groups: set[int]  # the groups that reported
    tallies: list[Tally]
    expected: int  # the step's quorum: groups that trained a share


class Controller:
    def __init__(
        self,
        settings: RL,
        task: Task,
        *,
        vocab: int,
        steps: int,
        context: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        """``context``: the model's seq_len, where a vLLM engine ends a completion (None: no engine does)."""
        self.settings, self.task, self.vocab, self.steps, self.clock = settings, task, vocab, steps, clock
        self.context = context
        self.allowed = None if task.allowed is None else frozenset(task.allowed.nonzero().flatten().tolist())
        # What a generator samples under, sent with each lease: the task (its tokenizer) is the controller's alone.
        self.sampling = {"allowed": None if self.allowed is None else sorted(self.allowed), "ends": list(task.ends)}
        self.buffer = ReplayBuffer(max_policy_age=settings.max_policy_age)
        self.version: int | None = None  # committed steps = the newest policy version; None until started
        self.batches: dict[int, Formed] = {}
        self.reporting: dict[int, Reporting] = {}  # committed step -> its groups' reports so far
        self.leases: dict[int, Lease] = {}
        self.members: dict[str, int] = {}  # generator -> its processes that receive weights (vLLM: one per GPU)
        self.held: dict[str, int] = {}  # generator -> the version it said it holds at its last ask
        self.servers: dict[int, str] = {}  # live trainer group -> its process's token
        self.serving: dict[int, int] = {}  # trainer group -> the version of its newest snapshot
        self.wants: dict[int, list[dict[str, Any]]] = {}  # trainer group -> transfers it is to serve
        self.pairs: dict[str, tuple[int, str, str]] = {}  # generator -> (group, token, pair id)
        self.window = Window()
        self.kept = KeptShare()  # the share of scored prompts kept: what a prompt in flight is expected to bring
        self._serial = 0
        self.rejected = 0  # generator answers refused by wire.py's checks
        self.refusals: dict[tuple[str, str], int] = {}  # (generator or OTHER, reason) -> answers refused
        self.askers: set[str] = set()  # every generator name that asked for work: the refusals' series
        self.started_from: dict[str, Any] | None = None  # the version and prompt stream it started from
        self.scored = 0  # prompts scored since the last batch was formed (or since the start)
        self.alike = 0  # of them, groups whose rewards were all equal (nothing to train)
        self.stopped = ""  # why the run stopped before its last step (one line); "" while it goes on
        self.asked: dict[int, float] = {}  # step -> when a trainer group first asked for its batch (not formed yet)
        self.told: set[int] = set()  # steps whose wait was said on the console
        self.delivered: set[str] = set()  # generators with an answer kept (one that keeps failing has none)
        self.baseline = False  # a group was told to evaluate the starting policy (once per fresh run)

    @property
    def done(self) -> bool:
        """The run is over: its last step committed, or it stopped (``stopped`` says why)."""
        return bool(self.stopped) or (self.version is not None and self.version >= self.steps)

    def _next(self) -> int:
        self._serial += 1
        return self._serial

    # -- trainer groups ------------------------------------------------------------------------------

    def start(self, group: int, token: str, step: int, state: str | None) -> dict[str, Any]:
        """A trainer group's process is up at committed ``step`` (its resume point), with its buffer state.

        ``baseline``: this group evaluates the starting policy; the first group up in a fresh run, once (a group
        restarted before the first commit does not evaluate it again)."""
        if self.version is None:
            self.version = step
            if state:
                self.buffer.load_state_dict(json.loads(state), where=f"trainer group {group}'s checkpoint rl state")
            self.started_from = {"version": step, "cursor": self.buffer.cursor, "pending": self.buffer.pending()}
        self.group_gone(group)
        self.servers[group] = token
        self.serving[group] = step
        baseline = not self.baseline and self.version == step == 0
        self.baseline = self.baseline or baseline
        return {"version": self.version, "baseline": baseline}

    def group_gone(self, group: int) -> None:
        for table in (self.servers, self.serving, self.wants):
            table.pop(group, None)
        self.pairs = {g: p for g, p in self.pairs.items() if p[0] != group}

    def batch(self, step: int) -> dict[str, Any] | None:
        """Step ``step``'s batch (formed at its first ask); None while too few groups are ready."""
        if self.version is None:
            return None
        if self.stopped:
            return {"stop": self.stopped}
        if self.done:
            return {"done": True}
        if step < self.version and step not in self.batches:  # a group about to heal: its gradients are zeroed
            step = max(self.batches, default=self.version)
        if step not in self.batches:
            if step != self.version:
                raise Invalid([f"batch: step {step} is ahead of the committed version {self.version}"])
            groups = self.buffer.sample(step, self.settings.prompts_per_step)
            if groups is None:
                self.asked.setdefault(step, self.clock())
                self.stopped = self._saturated(step)
                return {"stop": self.stopped} if self.stopped else None
            self.scored = self.alike = 0
            self.asked.pop(step, None)
            state = self.buffer.state_dict()
            trained = {g.prompt_index for g in groups}
            state["pending"] = [i for i in state["pending"] if i not in trained]
            state["counters"]["trained"] += len(groups)
            sent = [group_to_json(g) for g in groups]
            self.batches[step] = Formed(groups=groups, state=json.dumps(state, sort_keys=True), sent=sent)
        formed = self.batches[step]
        return {"step": step, "groups": formed.sent, "state": formed.state}

    def committed(self, group: int, step: int, stats: dict[str, Any]) -> tuple[dict[str, Any], list[Committed]]:
        """Group ``group`` committed and now holds version ``step``; the first report of a step moves the run on.

        Returns the steps whose reports are complete (for the console and the metrics): a step is, once as many
        groups reported a share's statistics (``stats["tally"]``) as its quorum had (``stats["participants"]``),
        or as there are live groups, or when a later step commits first (a group that died before reporting).
        """
        ready: list[Committed] = []
        first = False  # this report moves the run to ``step``
        if self.version is not None and step == self.version + 1 and self.version in self.batches:
            first = True
            formed = self.batches[self.version]
            self.buffer.trained(formed.groups)
            ages = tuple(g.age(self.version) for g in formed.groups)
            rewards = [r for g in formed.groups for r in g.rewards]
            measured = lengths(formed.groups, self.task.max_tokens, frozenset(self.task.ends))
            report = Committed(
                step=step, ages=ages, reward=sum(rewards) / len(rewards), window=self.window, trainer=dict(stats),
                lengths=measured,
            )  # fmt: skip
            ready += self.flush(before=step)
            self.reporting[step] = Reporting(committed=report, groups=set(), tallies=[], expected=1)
            self.window = Window()
            self.version = step
            self.batches = {s: b for s, b in self.batches.items() if s >= step - 1}
        pending = self.reporting.get(step)
        if pending is not None and group not in pending.groups:
            pending.groups.add(group)
            tally = Tally.from_json(stats.get("tally"))
            if tally is not None:
                pending.tallies.append(tally)
            participants = stats.get("participants")
            if isinstance(participants, int) and not isinstance(participants, bool):
                pending.expected = max(pending.expected, min(participants, 1 << 16))
            if len(pending.tallies) >= pending.expected or len(pending.groups) >= max(
                pending.expected, len(self.servers)
            ):
                ready.append(self._complete(self.reporting.pop(step)))
        # Every live group's rank 0 took a snapshot of this step before reporting it (policy.py): what it serves
        # from here on. Not only the lowest group's: a group that commits while a lower one is up but out of the
        # quorum (starting late, healing, stuck) is the only holder of its versions.
        if group in self.servers:
            self.serving[group] = max(step, self.serving.get(group, step))
        # One evaluation per step, whatever groups are in its quorum: the report that moved the run to it.
        return {"evaluates": first, "version": self.version}, ready

    def flush(self, before: int | None = None) -> list[Committed]:
        """The steps still waiting for reports (all, or those before ``before``), with what came."""
        steps = sorted(s for s in self.reporting if before is None or s < before)
        return [self._complete(self.reporting.pop(s)) for s in steps]

    @staticmethod
    def _complete(pending: Reporting) -> Committed:
        return replace(pending.committed, policy=summarize(pending.tallies, pending.expected))

    def stop(self, why: str) -> None:
        """End the run before its last step: generators are told "done", trainer groups "stop" (``why``)."""
        self.stopped = self.stopped or why

    def _saturated(self, step: int) -> str:
        """Why step ``step`` can never get a batch (one line), or "" while it still may."""
        s = self.settings
        bound = s.max_rollouts * s.prompts_per_step
        if self.scored < bound:
            return ""
        return (
            f"no batch for step {step + 1}: {self.scored} prompts scored since the last batch (rl.max_rollouts="
            f"{s.max_rollouts} x rl.prompts_per_step={s.prompts_per_step}) and {self.alike} of them scored alike, "
            f"{len(self.buffer)} of {s.prompts_per_step} groups with differing rewards ready: the training prompts "
            "are solved or the policy is certain of its answers (check rl.reward and rl.task's answers, or raise "
            "rl.temperature)"
        )

    def waiting(self) -> str | None:
        """Once per step, when a trainer group has waited ``WAIT_NOTICE_S`` for its batch: what it waits for."""
        step = self.version
        if step is None or step not in self.asked or step in self.told or self.done:
            return None
        waited = self.clock() - self.asked[step]
        if waited < WAIT_NOTICE_S:
            return None
        self.told.add(step)
        s = self.settings
        outstanding = sum(len(lease.prompts) for lease in self.leases.values())
        # The versions too: generators outside the age bound wait for weights that only a live group can serve.
        versions = sorted({v for v in self.held.values() if v >= 0})
        held = "none" if not versions else "-".join(map(str, sorted({versions[0], versions[-1]})))
        served = max(self.serving.values(), default=None)
        return (
            f"rl step {step + 1}: waiting {waited:.0f} s for its batch: {len(self.buffer)} of {s.prompts_per_step} "
            f"groups with differing rewards ready, {outstanding} prompts out with {len(self.members)} generator(s) "
            f"(holding version {held}; the trainer groups serve {'none' if served is None else f'version {served}'}); "
            f"{self.scored} scored since the last batch, {self.alike} alike (the run stops at "
            f"{s.max_rollouts * s.prompts_per_step}, rl.max_rollouts)"
        )

    def transfers(self, group: int, token: str) -> list[dict[str, Any]]:
        """The weight transfers group ``group``'s server is to make now (each once)."""
        if self.servers.get(group) != token:
            return []
        return self.wants.pop(group, [])

    # -- generators --------------------------------------------------------------------------------

    def lease(self, generator: str, held: int, sync_failed: bool = False, members: int = 1) -> dict[str, Any]:
        """What generator ``generator``, holding version ``held``, does next: done, wait, sync or generate.

        ``members``: how many of its processes receive the weights (1 for TorchGenerator, the tensor-parallel
        workers for vLLM); its pair is a group of ``1 + members`` (the sender is rank 0).
        """
        if self.done:
            return {"done": True}
        self.expire()
        self.members[generator] = members
        self.held[generator] = held
        self.askers.add(generator)
        if sync_failed:
            self.pairs.pop(generator, None)  # a fresh pair next time (the old one may be half set up)
        if self.version is None:
            return {"wait": WAIT_S}
        sync = self._sync(generator, held)
        if sync is not None:
            return {"sync": sync}
        if held < 0 or held < self.version - self.settings.max_policy_age:
            return {"wait": WAIT_S}  # its samples would be too old to train on: wait for weights
        count = self._leasable(held)
        if count < 1:
            return {"wait": WAIT_S}
        before = self.buffer.counters.reissued
        indices = self.buffer.issue(count, owner=generator)
        self.window.reissued += self.buffer.counters.reissued - before
        prompts = {i: self.task.tokenizer.encode(self.task.prompts[i].prompt) for i in indices}
        lease = self._next()
        self.leases[lease] = Lease(
            owner=generator, prompts=prompts, deadline=self.clock() + self.settings.lease_timeout_s, held=held
        )
        return {"lease": lease, "prompts": [[i, tokens] for i, tokens in prompts.items()], **self.sampling}

    def _leasable(self, held: int) -> int:
        """Prompts a generator holding ``held`` may take: at most ``rl.lease_prompts``, within ``rl.buffer_batches``
        batches ready or in flight, and only what a step within the age bound can still train (pacing.py)."""
        assert self.version is not None
        s = self.settings
        self.buffer.evict_stale(self.version)  # too old already: their prompts go to this lease, not a later one
        outstanding = sum(len(lease.prompts) for lease in self.leases.values())
        depth = s.buffer_batches * s.prompts_per_step - len(self.buffer) - outstanding
        space = room(
            held=held, version=self.version, max_policy_age=s.max_policy_age, prompts_per_step=s.prompts_per_step,
            formed=self.batches, ready=len(self.buffer),
        )  # fmt: skip
        return min(s.lease_prompts, depth, leasable(room=space, in_flight=outstanding, keep=self.kept.share))

    def _sync(self, generator: str, held: int) -> dict[str, Any] | None:
        """A weight transfer to ``generator`` when a live group holds a newer snapshot than ``held``."""
        candidates = [(v, -g) for g, v in self.serving.items() if v > held]
        if not candidates:
            return None
        version, newest_lowest = max(candidates)  # the newest snapshot; of those, the lowest group
        group = -newest_lowest
        token = self.servers[group]
        pair = self.pairs.get(generator)
        if pair is None or pair[:2] != (group, token):
            pair = (group, token, f"{group}.{token}.{generator}.{self._next()}")
            self.pairs[generator] = pair
        world = 1 + self.members.get(generator, 1)
        self.wants.setdefault(group, []).append({"pair": pair[2], "generator": generator, "world": world})
        return {"pair": pair[2], "group": group, "version": version, "world": world}

    def result(self, generator: str, data: Any) -> int:
        """Score and buffer a generator's answer; returns the groups kept. Refused: counted, prompts issued again."""
        try:
            got = self._checked(generator, data)
        except Refused as error:
            raise self._refused(generator, error) from None
        self.delivered.add(generator)
        indices = list(got)
        answers = score_answers(self.task, [self.task.prompts[i] for i in indices], [got[i] for i in indices])
        rewards = answers.rewards
        scored = score(indices, answers.groups, rewards, std=self.settings.advantage_std)
        for group in scored.kept:
            self.buffer.add(group)
        for index in scored.dropped_zero_advantage:
            self.buffer.drop_zero_advantage(index)
        self.kept.add(len(scored.kept), len(scored.dropped_zero_advantage))
        self.scored += len(indices)
        self.alike += len(scored.dropped_zero_advantage)
        self.window.generated_tokens += sum(len(c.response) for i in indices for c in got[i])
        seconds = data.get("seconds")
        if isinstance(seconds, (int, float)) and 0 <= seconds < 1e6:
            self.window.generate_seconds += float(seconds)
        self.window.rewards += [r for row in rewards for r in row]
        self.window.completions += sum(len(row) for row in rewards)
        self.window.truncated += answers.truncated
        return len(scored.kept)

    def _checked(self, generator: str, data: Any) -> dict[int, list[Completion]]:
        """The answer's completions, checked against what the run's engines can write for its lease."""
        lease_id = data.get("lease") if isinstance(data, dict) else None
        lease = self.leases.get(lease_id) if isinstance(lease_id, int) else None
        if lease is None or lease.owner != generator or not isinstance(lease_id, int):
            raise Refused(
                "lease", f"result from {generator[:40]}: lease {lease_id!r} is not one it holds (expired or forged)"
            )
        del self.leases[lease_id]
        assert self.version is not None
        bounds = Bounds(
            n=self.settings.group_size, max_tokens=self.task.max_tokens, vocab=self.vocab, allowed=self.allowed,
            ends=frozenset(self.task.ends), context=self.context, held=lease.held, newest=self.version,
        )  # fmt: skip
        try:
            return completions_from_result(data, lease.prompts, bounds)
        except Refused:
            self.rejected += 1
            self.window.reissued += len(self.buffer.release(generator))
            raise

    def _refused(self, generator: str, error: Refused) -> Refused:
        """Count a refusal by generator and reason; a name that never asked for work counts as OTHER."""
        name = generator if generator in self.askers else OTHER
        key = (name, error.reason)
        self.refusals[key] = self.refusals.get(key, 0) + 1
        self.window.refused += 1
        count = sum(n for (g, _), n in self.refusals.items() if g == name)
        return Refused(error.reason, error.lines[0], generator=name, count=count)

    def generator_gone(self, generator: str) -> int:
        """A generator's process ended: its leased prompts are issued again. Returns how many."""
        self.leases = {k: lease for k, lease in self.leases.items() if lease.owner != generator}
        self.members.pop(generator, None)
        self.held.pop(generator, None)
        self.pairs.pop(generator, None)
        lost = len(self.buffer.release(generator))
        self.window.reissued += lost
        return lost

    def expire(self) -> None:
        now = self.clock()
        for owner in {lease.owner for lease in self.leases.values() if lease.deadline < now}:
            self.generator_gone(owner)
