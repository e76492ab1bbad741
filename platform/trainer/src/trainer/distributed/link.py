"""A model of the inter-region link that cross-group all-reduces travel over (pure; no torch).

Used twice: by the emulator in the cross-group process group (``distributed/counted_pg.py``, settings
``ft.link_rtt_ms`` and ``ft.link_gbps``), which holds each all-reduce back until the model says it
would have finished, and by ``scripts/bench_cross_region.py``, which predicts tokens/s from it. One
model for both, so the measured runs and the predictions can be compared.

What is counted, for an all-reduce of ``payload`` bytes over ``n`` replica groups (a ring all-reduce,
NCCL's and gloo's algorithm for large messages: a reduce-scatter then an all-gather, 2(n-1) steps,
each moving payload/n bytes from every group to the next):

* bytes on the wire, per group and direction: 2(n-1)/n x payload (``wire_bytes``);
* latency: the 2(n-1) steps are sequential, each a one-way trip of RTT/2: (n-1) x RTT (``latency_s``);
  for two groups one RTT;
* the link carries one transfer at a time at ``gbps`` (all-reduces issued together, e.g. DiLoCo's one per
  parameter, queue behind each other for bandwidth), while latencies overlap (``Link.schedule``).

Not modelled: the Lighthouse's quorum round trips, congestion, loss, TCP slow start.
"""

from __future__ import annotations

from dataclasses import dataclass


def wire_bytes(payload: int, groups: int) -> int:
    """Bytes each group sends (and receives) for a ring all-reduce of ``payload`` bytes over ``groups`` groups."""
    if groups < 2:
        return 0  # nothing crosses the link
    return 2 * (groups - 1) * payload // groups


def latency_s(rtt_ms: float, groups: int) -> float:
    """The ring's 2(groups-1) sequential one-way trips of RTT/2."""
    return max(groups - 1, 0) * rtt_ms / 1000


def transfer_s(nbytes: int, gbps: float) -> float:
    """Seconds to push ``nbytes`` through a link of ``gbps`` Gbit/s; 0 = unlimited."""
    return nbytes * 8 / (gbps * 1e9) if gbps > 0 else 0.0


def allreduce_s(payload: int, groups: int, rtt_ms: float, gbps: float) -> float:
    """One all-reduce alone on the link: latency + wire bytes / bandwidth."""
    if groups < 2:
        return 0.0
    return latency_s(rtt_ms, groups) + transfer_s(wire_bytes(payload, groups), gbps)


@dataclass
class Link:
    """One replica group's (one rank's) link: when each all-reduce it starts would complete.

    ``busy_s`` is the time something was in flight on the link (the union of the all-reduces'
    intervals): what the emulator adds to a run that never overlaps communication with compute.
    """

    rtt_ms: float
    gbps: float
    free_at: float = 0.0  # the link is sending until then
    horizon: float = 0.0  # the last completion scheduled so far
    wire: int = 0
    busy_s: float = 0.0

    @property
    def enabled(self) -> bool:
        return self.rtt_ms > 0 or self.gbps > 0

    def schedule(self, now: float, payload: int, groups: int) -> float:
        """The completion time of an all-reduce of ``payload`` bytes over ``groups`` groups started at ``now``."""
        if groups < 2:
            return now
        sent = wire_bytes(payload, groups)
        self.free_at = max(now, self.free_at) + transfer_s(sent, self.gbps)
        done = self.free_at + latency_s(self.rtt_ms, groups)
        self.busy_s += max(0.0, done - max(now, self.horizon))
        self.horizon = max(self.horizon, done)
        self.wire += sent
        return done


def inner_step_s(
    compute_s: float, steps_per_sync: int, payload: int, groups: int, rtt_ms: float, gbps: float, overlap_steps: int = 0
) -> float:
    """Seconds per inner step of a run that syncs ``payload`` bytes every ``steps_per_sync`` inner steps.

    DDP: ``steps_per_sync`` 1 (this trainer waits for the gradients after the backward pass). DiLoCo:
    ``sync_every``. Streaming DiLoCo: ``sync_every / fragments`` with a fragment's bytes, and torchft
    starts each fragment's all-reduce ``fragment_sync_delay`` inner steps before it waits for it
    (``overlap_steps``): only what the link takes beyond those steps' compute is exposed.
    """
    exposed = max(0.0, allreduce_s(payload, groups, rtt_ms, gbps) - overlap_steps * compute_s)
    return compute_s + exposed / steps_per_sync
