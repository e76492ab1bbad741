"""The replay buffer and the ledger of issued prompts: a hard bound on sample age, and exact resumes.

Every prompt index goes through: issued (to a generator) -> added (its scored group waits here) ->
sampled (in a training batch) -> trained (the step committed). Dropped groups (all rewards equal)
leave after being added; stale ones (older than ``max_policy_age``) are evicted and their indices
issued again, so every index is trained once or dropped once, never skipped.

Age: ``training version - group version``, the group's version being its oldest completion's. A
group older than ``max_policy_age`` is never returned by ``sample``: it is evicted first and counted
(``dropped_stale``). ``max_policy_age = 0`` is on-policy; 1 (the default, as torchforge's ``off_by_n``,
NeMo-RL's ``max_trajectory_age_steps`` and prime-rl's overlap) lets generation run one step ahead.

The persistent state is small and JSON-able (``state_dict``): the prompt cursor and the indices issued
but not yet trained, with the counters. Episodes are not kept: with an age bound of one or two
versions they are seconds of generation, and they would make the checkpoint's size depend on rollout
length. A resumed run issues exactly the pending indices again, first, then continues at the cursor.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

from contract.problem import Invalid
from trainer.rl.episode import Group


@dataclass(kw_only=True)
class Counters:
    issued: int = 0  # indices handed to generators, re-issues included
    reissued: int = 0  # of them, indices issued again (a dead generator's, a stale group's, a resume's)
    trained: int = 0  # groups in committed steps
    dropped_stale: int = 0  # groups evicted for age > max_policy_age
    dropped_zero_advantage: int = 0  # groups whose rewards were all equal
    dropped_unknown: int = 0  # groups for indices not outstanding (a released generator's late answer)
    age_violations: int = 0  # groups sampled with age > max_policy_age: 0 by construction, counted to prove it
    max_sampled_age: int = 0


class ReplayBuffer:
    def __init__(self, *, max_policy_age: int = 1) -> None:
        if max_policy_age < 0:
            raise ValueError(f"max_policy_age {max_policy_age} < 0")
        self.max_policy_age = max_policy_age
        self.cursor = 0  # the next index never issued
        self._outstanding: dict[int, str] = {}  # issued, no group back yet -> the generator it went to
        self._ready: list[Group] = []  # scored, waiting for a batch; oldest first
        self._sampled: set[int] = set()  # in a batch whose step has not committed yet
        self._requeue: deque[int] = deque()  # to issue again before new indices
        self.counters = Counters()

    def __len__(self) -> int:
        return len(self._ready)

    def issue(self, count: int, owner: str = "") -> list[int]:
        """``count`` indices for generator ``owner``: re-issues first, then new ones from the cursor."""
        out: list[int] = []
        while len(out) < count and self._requeue:
            out.append(self._requeue.popleft())
            self.counters.reissued += 1
        fresh = count - len(out)
        out += range(self.cursor, self.cursor + fresh)
        self.cursor += fresh
        for index in out:
            self._outstanding[index] = owner
        self.counters.issued += len(out)
        return out

    def add(self, group: Group) -> bool:
        """Keep a scored group; False (and counted) when its index is not outstanding any more."""
        if self._outstanding.pop(group.prompt_index, None) is None:
            self.counters.dropped_unknown += 1
            return False
        self._ready.append(group)
        return True

    def drop_zero_advantage(self, index: int) -> None:
        """The group for ``index`` had all-equal rewards: done with it, nothing to train."""
        if self._outstanding.pop(index, None) is None:
            self.counters.dropped_unknown += 1
            return
        self.counters.dropped_zero_advantage += 1

    def release(self, owner: str) -> list[int]:
        """A generator is gone: its outstanding indices are issued again (to anyone), in order."""
        lost = sorted(i for i, o in self._outstanding.items() if o == owner)
        for index in lost:
            del self._outstanding[index]
        self._requeue.extend(lost)
        return lost

    def evict_stale(self, version: int) -> int:
        """Drop every group older than the bound at training version ``version``; their indices go back."""
        stale = [g for g in self._ready if g.age(version) > self.max_policy_age]
        if stale:
            self._ready = [g for g in self._ready if g.age(version) <= self.max_policy_age]
            self._requeue.extend(g.prompt_index for g in stale)
            self.counters.dropped_stale += len(stale)
        return len(stale)

    def sample(self, version: int, size: int) -> list[Group] | None:
        """Exactly ``size`` groups no older than the bound at ``version`` (oldest first), or None if fewer wait."""
        if size < 1:
            raise ValueError(f"batch size {size} < 1")
        self.evict_stale(version)
        if len(self._ready) < size:
            return None
        # Oldest version first (stable: arrival order within a version): a group that can wait one more step
        # leaves room to one that would be past the bound at the next.
        self._ready.sort(key=lambda g: g.version)
        batch, self._ready = self._ready[:size], self._ready[size:]
        for group in batch:
            age = group.age(version)
            self.counters.max_sampled_age = max(self.counters.max_sampled_age, age)
            self.counters.age_violations += age > self.max_policy_age
            self._sampled.add(group.prompt_index)
        return batch

    def trained(self, groups: list[Group]) -> None:
        """The step that trained on ``groups`` committed: their indices are done."""
        for group in groups:
            self._sampled.discard(group.prompt_index)
        self.counters.trained += len(groups)

    def pending(self) -> list[int]:
        """Every index issued but not trained (nor dropped): what a resumed run must issue again."""
        ready = [g.prompt_index for g in self._ready]
        return sorted({*self._outstanding, *ready, *self._sampled, *self._requeue})

    def state_dict(self) -> dict[str, Any]:
        return {"cursor": self.cursor, "pending": self.pending(), "counters": asdict(self.counters)}

    def load_state_dict(self, state: Any, where: str = "rl buffer state") -> None:
        """Restore a state_dict (read from a checkpoint: validated, one line when it is not one of ours)."""
        cursor, pending, counters = _checked(state, where)
        self.cursor = cursor
        self._outstanding, self._ready, self._sampled = {}, [], set()
        self._requeue = deque(pending)
        self.counters = counters


def _checked(state: Any, where: str) -> tuple[int, list[int], Counters]:
    def bad(what: str) -> Invalid:
        return Invalid([f"{where}: {what}; it was not written by this buffer: resume from another checkpoint"])

    if not isinstance(state, dict) or set(state) != {"cursor", "pending", "counters"}:
        raise bad("expected an object with cursor, pending and counters")
    cursor, pending, counters = state["cursor"], state["pending"], state["counters"]
    if not _count(cursor):
        raise bad(f"cursor {cursor!r} is not a count")
    if not isinstance(pending, list) or not all(_count(i) and i < cursor for i in pending):
        raise bad("pending must be a list of indices below the cursor")
    if len(set(pending)) != len(pending):
        raise bad("pending lists an index twice")
    names = set(Counters.__dataclass_fields__)
    if not isinstance(counters, dict) or set(counters) != names or not all(map(_count, counters.values())):
        raise bad(f"counters must be counts named {', '.join(sorted(names))}")
    return cursor, sorted(pending), Counters(**counters)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
