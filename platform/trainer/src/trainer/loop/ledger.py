"""The commit ledger: what torchft committed, as the training loop sees it at each sync (pure, no I/O).

At the end of each sync period the loop asks torchft for the committed step: moved on, the sync
committed; unchanged, the whole period's inner steps are lost. Committed steps at or below the group's
high-water mark (observe/runs.py) were trained before, by an earlier life of the group: replays after a resume.
Streaming DiLoCo's fragments agree between groups only right after their own sync, so the ledger also
keeps each fragment's digest from its last sync of the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Sync:
    """What one sync decided."""

    step: int  # the committed step after it
    committed: bool  # it moved the committed step on
    replayed: bool  # its steps redo work from before a resume (they count as replays, not as progress)


class Ledger:
    """Syncs and their verdicts since the loop started at committed step ``step``.

    ``replays_up_to``: the highest step this group ever logged (-1: none); ``fragments``: DiLoCo's
    fragments (0 for DDP); ``target``: the committed step the run ends at.
    """

    def __init__(self, step: int, replays_up_to: int, fragments: int, target: int) -> None:
        self.synced = step
        self.replays_up_to = replays_up_to
        self.target = target
        # DiLoCo: the digest of each fragment just after its last sync, by fragment.
        self.fragments: list[str | None] = [None] * fragments

    def sync(self, step: int) -> Sync:
        """The verdict of the sync that left the committed step at ``step``."""
        committed = step > self.synced
        self.synced = step
        return Sync(step, committed, replayed=step <= self.replays_up_to)

    def record_fragment(self, step: int, digest: Callable[[int], str]) -> None:
        """After committed ``step``: keep ``digest(fragment)`` if this was that fragment's last sync of the run.

        DiLoCo syncs fragment ``step % fragments`` at committed step ``step``, then ``step + 1`` is
        committed. ``digest`` is a collective in a sharded group, so every rank calls this at every commit.
        """
        count = len(self.fragments)
        if count and step > self.target - count:
            fragment = (step - 1) % count
            self.fragments[fragment] = digest(fragment)
