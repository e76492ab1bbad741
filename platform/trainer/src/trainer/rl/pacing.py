"""How many prompts a generator may lease: only what the steps that can still train its samples have room for.

A group sampled on weights ``held`` can be trained at steps ``held`` .. ``held + max_policy_age``; after that it
is evicted for age (buffer.py). Leasing by a fixed depth (``rl.buffer_batches`` batches ready) lets a generator
one version behind fill a second batch that only a step past the bound would take: 22-26% of generated groups
were evicted at the defaults (issue 41). Here the lease is sized from the room left in the steps that can
still take it: each such step whose batch is not formed yet holds ``prompts_per_step`` groups, less the groups
ahead of it (ready, and expected from the prompts in flight). Prompts whose groups all score the same are
dropped, not trained (advantages.py), so a prompt in flight is expected to bring ``keep`` groups, the recent
share kept: the lease over-issues by 1 / keep, never by more than 1 / MIN_KEEP.

Pure: the controller passes its state in and leases what this returns.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Collection

MIN_KEEP = 0.25  # a policy that makes most groups all-equal is not leased more than 4x the room
WINDOW = 256  # prompts the share kept is measured over: a few steps' worth, so it follows the policy


def room(
    *, held: int, version: int, max_policy_age: int, prompts_per_step: int, formed: Collection[int], ready: int
) -> int:
    """Groups still to be formed into batches, in the steps that can train one sampled on weights ``held``."""
    steps = [s for s in range(version, held + max_policy_age + 1) if s not in formed]
    return len(steps) * prompts_per_step - ready


def leasable(*, room: int, in_flight: int, keep: float) -> int:
    """Prompts to lease now: the room, less what the ``in_flight`` prompts are expected to fill, at ``keep``."""
    keep = min(1.0, max(MIN_KEEP, keep))
    return max(0, math.floor(room / keep - in_flight + 1e-9))


class KeptShare:
    """The share of recently scored prompts whose group was kept (rewards differed), over the last WINDOW."""

    def __init__(self, window: int = WINDOW) -> None:
        self.recent: deque[bool] = deque(maxlen=window)

    def add(self, kept: int, dropped: int) -> None:
        self.recent.extend([True] * kept + [False] * dropped)

    @property
    def share(self) -> float:
        """1.0 before anything was scored: lease no more than the room until the drops are known."""
        return sum(self.recent) / len(self.recent) if self.recent else 1.0
