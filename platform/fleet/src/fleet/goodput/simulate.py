"""One job over a period, event by event: failures, detection, recovery, checkpoints and repairs (pure).

Failures are a Poisson process per node at the published rate (`failures`),
drawn up front from the seed, so runs that differ only in the checkpoint
interval or the recovery mode see the same failures (common random numbers)
and their difference is the policy's, not the dice's. A failure interrupts
the job only on a node that is training; it is drawn on a uniformly chosen
paid node.

Two recovery modes:

- `restart`: any failure stops the whole job, which resumes from its last
  durable checkpoint once it has all its nodes again (a spare, or the failed
  node back from repair): Ray Train restarts its whole worker group with a
  fixed number of workers, which is what the trainer does today under Ray
  with replica groups of several GPUs (trainer README).
- `live` (torchft): a failure on one node stops only its replica group; the
  others stall for the detection time and train on; the group comes back
  (same node, a spare, or the repaired node) and heals from a live peer.
  Failures of scope `job` still restart everything from the checkpoint.

Every paid GPU-second lands in exactly one bucket (BUCKETS).
"""

from __future__ import annotations

import heapq
import math
import random
from bisect import bisect
from collections import Counter
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Literal

from fleet.goodput.jobs import Effect, Job

Mode = Literal["live", "restart"]
MODES: tuple[Mode, ...] = ("restart", "live")
BUCKETS = (
    "productive",  # training that counts
    "checkpoint",  # blocked while a checkpoint is staged
    "detect",  # stalled until the failure is noticed
    "restart",  # the job or a group starting again, healing
    "replayed",  # work lost since the last durable checkpoint, done again
    "waiting",  # the job's healthy nodes idle until it has all its nodes again
    "repair",  # nodes broken, waiting for or in Warden's repair
    "spare",  # healthy nodes outside the job
)


@dataclass(frozen=True)
class Run:
    mode: Mode
    interval_s: float  # training time between checkpoints
    blocked_s: float  # per checkpoint
    durable_lag_s: float  # from a checkpoint's start until it can be resumed from
    detect_s: float
    heal_s: float  # a group back in the quorum (live)
    job_restart_s: float
    period_s: float
    failure_scale: float = 1.0  # times the published rate


@dataclass
class Result:
    paid: float  # GPU-seconds
    buckets: dict[str, float]
    interruptions: Counter[str] = field(default_factory=Counter)  # by the source's category

    @property
    def goodput(self) -> float:
        return self.buckets["productive"] / self.paid if self.paid else 0.0


def failures(job: Job, period_s: float, scale: float, seed: int) -> list[tuple[float, float, Effect]]:
    """(time, a uniform draw that picks the node, the cause) for every failure on the job's paid nodes."""
    rng = random.Random(seed)
    weights = list(accumulate(e.cause.per_node_second for e in job.effects))
    rate = weights[-1] * scale * job.nodes if weights else 0.0
    out: list[tuple[float, float, Effect]] = []
    t = 0.0
    while rate > 0:
        t += rng.expovariate(rate)
        if t >= period_s:
            break
        pick, which = rng.random(), rng.random() * weights[-1]
        out.append((t, pick, job.effects[min(bisect(weights, which), len(job.effects) - 1)]))
    return out


def saved_progress(progress: float, interval_s: float, blocked_s: float, lag_s: float) -> float:
    """Training progress held by the newest durable checkpoint: the last multiple of the interval that was
    captured at least `lag_s` of wall time ago (wall time runs faster than progress by the blocked share)."""
    share = interval_s / (interval_s + blocked_s)
    return max(0, math.floor((progress - lag_s * share) / interval_s)) * interval_s


class _Sim:
    def __init__(self, job: Job, run: Run) -> None:
        self.job, self.run, self.gpus = job, run, job.gpus_per_node
        self.share = run.interval_s / (run.interval_s + run.blocked_s)
        self.buckets = dict.fromkeys(BUCKETS, 0.0)
        self.interruptions: Counter[str] = Counter()
        self.now = 0.0
        self.phase = "running"  # running | detect | waiting | restarting
        self.members = job.target  # nodes the job holds in its phase (running: groups training)
        self.healing = 0
        self.free = job.spares
        self.queue: list[float] = []  # broken nodes waiting for a repair slot: their repair times
        self.repairing = 0
        self.stalled_until = 0.0
        self.progress = 0.0  # training seconds since the last (re)start
        self.epoch = 0  # a full restart voids the heals and phase ends scheduled before it
        self.events: list[tuple[float, int, str, int]] = []
        self.seq = 0
        self.pending: dict[int, tuple[float, Effect]] = {}  # failure events: the node draw and the cause

    def push(self, at: float, kind: str) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at, self.seq, kind, self.epoch))

    def accrue(self, until: float) -> None:
        dt, gpus = until - self.now, self.gpus
        b = self.buckets
        b["repair"] += (len(self.queue) + self.repairing) * gpus * dt
        b["spare"] += self.free * gpus * dt
        b["restart"] += self.healing * gpus * dt
        held = self.members * gpus * dt
        if self.phase == "running" and self.now >= self.stalled_until:
            b["productive"] += held * self.share
            b["checkpoint"] += held * (1 - self.share)
            self.progress += dt * self.share
        else:
            bucket = {"running": "detect", "detect": "detect", "waiting": "waiting", "restarting": "restart"}
            b[bucket[self.phase]] += held
        self.now = until

    def fail(self, pick: float, effect: Effect) -> None:
        if self.phase != "running" or pick >= self.members / self.job.nodes:
            return  # the node that failed was not training (a spare, healing or the job is down)
        self.interruptions[effect.cause.category] += 1
        broken = effect.repair_s > 0
        if broken:
            self.queue.append(effect.repair_s)
            self.start_repairs()
        if self.run.mode == "restart" or effect.scope == "job" or self.members == 1:
            self.full_restart(node_stays=not broken)
            return
        self.members -= 1
        self.stalled_until = max(self.stalled_until, self.now + self.run.detect_s)
        self.push(self.stalled_until, "unstall")
        if not broken:
            self.start_heal(self.run.detect_s)  # its pods restart on the same node
        self.fill()

    def full_restart(self, node_stays: bool) -> None:
        lost = self.progress - saved_progress(
            self.progress, self.run.interval_s, self.run.blocked_s, self.run.durable_lag_s
        )
        moved = lost * self.members * self.gpus
        self.buckets["productive"] -= moved
        self.buckets["replayed"] += moved
        self.members += self.healing - (0 if node_stays else 1)
        self.healing, self.progress, self.stalled_until = 0, 0.0, self.now
        self.epoch += 1
        self.phase = "detect"
        self.push(self.now + self.run.detect_s, "phase")

    def start_repairs(self) -> None:
        while self.queue and self.repairing < self.job.slots:
            self.repairing += 1
            self.push(self.now + self.queue.pop(0), "repaired")

    def take_free(self) -> None:
        take = min(self.free, self.job.target - self.members - self.healing)
        self.free -= take
        self.members += take

    def start_heal(self, delay: float) -> None:
        self.healing += 1
        self.push(self.now + delay + self.run.heal_s, "healed")

    def fill(self) -> None:
        """Live: a free node (spare or repaired) starts a group in place of a lost one."""
        if self.run.mode != "live" or self.phase != "running":
            return
        while self.free and self.members + self.healing < self.job.target:
            self.free -= 1
            self.start_heal(0.0)

    def phase_end(self) -> None:
        if self.phase == "detect":
            self.take_free()
            if self.run.mode == "restart" and self.members < self.job.target:
                self.phase = "waiting"  # Ray Train needs every worker back
                return
            self.phase = "restarting"
            self.push(self.now + self.run.job_restart_s, "phase")
        elif self.phase == "restarting":
            self.phase = "running"
            self.fill()

    def repaired(self) -> None:
        self.repairing -= 1
        self.free += 1
        self.start_repairs()
        if self.phase == "waiting":
            self.take_free()
            if self.members == self.job.target:
                self.phase = "restarting"
                self.push(self.now + self.run.job_restart_s, "phase")
        self.fill()

    def simulate(self, seed: int) -> Result:
        for at, pick, effect in failures(self.job, self.run.period_s, self.run.failure_scale, seed):
            self.seq += 1
            heapq.heappush(self.events, (at, self.seq, "fail", -1))
            self.pending[self.seq] = (pick, effect)
        while self.events and self.events[0][0] < self.run.period_s:
            at, seq, kind, epoch = heapq.heappop(self.events)
            self.accrue(at)
            if kind == "fail":
                self.fail(*self.pending.pop(seq))
            elif kind == "repaired":
                self.repaired()
            elif epoch != self.epoch:
                continue  # scheduled before a full restart that voided it
            elif kind == "phase":
                self.phase_end()
            elif kind == "healed":
                self.healing -= 1
                self.members += 1
        self.accrue(self.run.period_s)
        return Result(self.job.gpus * self.run.period_s, self.buckets, self.interruptions)


def simulate(job: Job, run: Run, seed: int) -> Result:
    """Every paid GPU-second of `job` over `run.period_s`, by bucket; deterministic for a seed."""
    return _Sim(job, run).simulate(seed)


def interruptions_per_node_second(job: Job, mode: Mode) -> float:
    """What stops the whole job, per training node: every cause under `restart`, job-scope ones under `live`."""
    return sum(e.cause.per_node_second for e in job.effects if mode == "restart" or e.scope == "job")
