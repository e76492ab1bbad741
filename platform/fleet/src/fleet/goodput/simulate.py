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

A live run that is a RayJob under Kueue with topology-aware scheduling
(`Run.kueue`, fleet.goodput.nodeloss) also follows Kueue's rules for a node
that leaves the job's assignment (a vanished host once its pod is evicted, a
node Warden drains): `fail-fast` (Kueue's default) evicts the RayJob there,
`hot-swap` (FailFast off, as shipped) keeps it admitted unless another node
of the same Workload is still marked failed. An evicted RayJob waits until
its pool is whole again (the gang needs every node), restarts and resumes
from its checkpoint. There a vanished host's group is replaced only once Ray
has marked the node dead, and a repaired node is a spare again once its new
Ray worker pod has started and joined. For the cross-region job an eviction
restarts the whole job, although only the failed node's region is evicted:
an upper bound on that cost.

Every paid GPU-second lands in exactly one bucket (BUCKETS).
"""

from __future__ import annotations

import heapq
import math
import random
from bisect import bisect, bisect_right
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Literal

from fleet.goodput.jobs import Effect, Job

Mode = Literal["live", "restart"]
MODES: tuple[Mode, ...] = ("restart", "live")
Kueue = Literal["none", "hot-swap", "fail-fast"]  # how Kueue treats a failed node ("none": not under Kueue)
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
    kueue: Kueue = "none"
    ray_detect_s: float = 0.0  # under Kueue's rows (RayJobs): a vanished host until Ray marks it dead
    rejoin_s: float = 0.0  # and a repaired node until its new Ray worker pod has joined


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
        self.phase = "running"  # running | detect | waiting | restarting | requeued (evicted by Kueue)
        self.members = job.target  # nodes the job holds in its phase (running: groups training)
        self.healing = 0
        self.free = job.spares
        self.queue: list[tuple[float, int]] = []  # broken nodes waiting for a repair slot: (repair time, node)
        self.repairing = 0
        self.broken: set[int] = set()  # the nodes queued or in repair
        self.failed = 0  # nodes sent to repair so far: each one's number
        self.rejoining = 0  # repaired nodes whose new Ray worker pod has not joined yet
        self.marked: dict[int, set[int]] = {}  # per pool (one Kueue Workload each): nodes Kueue marked failed
        self.admission = 0  # a Kueue eviction voids the marks and rejoins scheduled before it
        self.stalled_until = 0.0
        self.progress = 0.0  # training seconds since the last (re)start
        self.epoch = 0  # a full restart voids the heals and phase ends scheduled before it
        self.events: list[tuple[float, int, str, int]] = []
        self.seq = 0
        self.payload: dict[int, tuple[Any, ...]] = {}  # by event: its handler's arguments (a failure, a node)

    def push(self, at: float, kind: str, payload: tuple[Any, ...] | None = None) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at, self.seq, kind, self.epoch))
        if payload is not None:
            self.payload[self.seq] = payload

    def accrue(self, until: float) -> None:
        dt, gpus = until - self.now, self.gpus
        b = self.buckets
        b["repair"] += (len(self.queue) + self.repairing + self.rejoining) * gpus * dt
        b["spare"] += self.free * gpus * dt
        b["restart"] += self.healing * gpus * dt
        held = self.members * gpus * dt
        if self.phase == "running" and self.now >= self.stalled_until:
            b["productive"] += held * self.share
            b["checkpoint"] += held * (1 - self.share)
            self.progress += dt * self.share
        else:
            bucket = {
                "running": "detect",
                "detect": "detect",
                "waiting": "waiting",
                "restarting": "restart",
                "requeued": "waiting",  # evicted: the gang's healthy nodes idle until it is admitted again
            }
            b[bucket[self.phase]] += held
        self.now = until

    def fail(self, pick: float, effect: Effect) -> None:
        if self.phase != "running" or pick >= self.members / self.job.nodes:
            return  # the node that failed was not training (a spare, healing or the job is down)
        self.interruptions[effect.cause.category] += 1
        broken = effect.repair_s > 0
        if broken:
            self.break_node(pick, effect)
        if self.run.mode == "restart" or effect.scope == "job" or self.members == 1:
            self.full_restart(node_stays=not broken)
            return
        self.members -= 1
        self.stalled_until = max(self.stalled_until, self.now + self.run.detect_s)
        self.push(self.stalled_until, "unstall")
        if not broken:
            self.start_heal(self.run.detect_s)  # its pods restart on the same node
        self.fill(self.run.ray_detect_s if effect.vanishes else 0.0)

    def break_node(self, pick: float, effect: Effect) -> None:
        """The node goes to repair; under Kueue, it is marked failed once it leaves the job's assignment."""
        self.failed += 1
        node = self.failed
        self.broken.add(node)
        self.queue.append((effect.repair_s, node))
        self.start_repairs()
        if self.run.kueue != "none" and effect.kueue_s is not None:
            pools = list(accumulate(self.job.pool_nodes or (self.job.nodes,)))
            pool = min(bisect_right(pools, pick * self.job.nodes), len(pools) - 1)
            self.push(self.now + effect.kueue_s, "kueue", (node, pool, self.admission))

    def roll_back(self) -> None:
        """The work since the newest durable checkpoint is lost: done again after the restart."""
        lost = self.progress - saved_progress(
            self.progress, self.run.interval_s, self.run.blocked_s, self.run.durable_lag_s
        )
        moved = lost * self.members * self.gpus
        self.buckets["productive"] -= moved
        self.buckets["replayed"] += moved
        self.progress, self.stalled_until = 0.0, self.now
        self.epoch += 1

    def full_restart(self, node_stays: bool) -> None:
        self.roll_back()
        self.members += self.healing - (0 if node_stays else 1)
        self.healing = 0
        self.phase = "detect"
        self.push(self.now + self.run.detect_s, "phase")

    def kueue_marks(self, node: int, pool: int, admission: int) -> None:
        """Kueue marks the node failed (nodeloss: FailFast, or a second failed node of the Workload, evicts)."""
        if admission != self.admission or node not in self.broken:
            return  # evicted since (a new assignment), or the node is back
        marked = self.marked.setdefault(pool, set())
        if self.run.kueue == "fail-fast" or marked:
            self.evict()
        else:
            marked.add(node)

    def evict(self) -> None:
        """Kueue evicts the RayJob: every pod goes, and the gang is admitted again only whole."""
        self.roll_back()
        self.admission += 1
        self.marked.clear()
        self.members += self.healing + self.free + self.rejoining  # idle, waiting for readmission
        self.healing = self.free = self.rejoining = 0
        self.phase = "requeued"
        self.readmit()

    def readmit(self) -> None:
        if self.phase == "requeued" and not self.broken:
            self.phase = "restarting"
            self.members, self.free = self.job.target, self.job.nodes - self.job.target
            self.push(self.now + self.run.job_restart_s, "phase")

    def start_repairs(self) -> None:
        while self.queue and self.repairing < self.job.slots:
            self.repairing += 1
            repair, node = self.queue.pop(0)
            self.push(self.now + repair, "repaired", (node,))

    def take_free(self) -> None:
        take = min(self.free, self.job.target - self.members - self.healing)
        self.free -= take
        self.members += take

    def start_heal(self, delay: float) -> None:
        self.healing += 1
        self.push(self.now + delay + self.run.heal_s, "healed")

    def fill(self, delay: float = 0.0) -> None:
        """Live: a free node (spare or repaired) starts a group in place of a lost one, after `delay`."""
        if self.run.mode != "live" or self.phase != "running":
            return
        while self.free and self.members + self.healing < self.job.target:
            self.free -= 1
            self.start_heal(delay)

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

    def repaired(self, node: int) -> None:
        self.repairing -= 1
        self.broken.discard(node)
        for marked in self.marked.values():
            marked.discard(node)  # Ready again: Kueue's mark goes (handleHealthyNode)
        self.start_repairs()
        if self.phase == "requeued":
            self.members += 1
            self.readmit()
        elif self.run.rejoin_s > 0:
            self.rejoining += 1
            self.push(self.now + self.run.rejoin_s, "rejoined", (self.admission,))
        else:
            self.returned()

    def rejoined(self, admission: int) -> None:
        if admission == self.admission:  # else the eviction already counted the node as back
            self.rejoining -= 1
            self.returned()

    def returned(self) -> None:
        self.free += 1
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
            self.payload[self.seq] = (pick, effect)
        while self.events and self.events[0][0] < self.run.period_s:
            at, seq, kind, epoch = heapq.heappop(self.events)
            self.accrue(at)
            self.handle(kind, seq, epoch)
        self.accrue(self.run.period_s)
        return Result(self.job.gpus * self.run.period_s, self.buckets, self.interruptions)

    def handle(self, kind: str, seq: int, epoch: int) -> None:
        handlers: dict[str, Callable[..., None]] = {
            "fail": self.fail,
            "repaired": self.repaired,
            "kueue": self.kueue_marks,
            "rejoined": self.rejoined,
        }
        if kind in handlers:
            handlers[kind](*self.payload.pop(seq))
        elif epoch != self.epoch:
            return  # scheduled before a full restart that voided it
        elif kind == "phase":
            self.phase_end()
        elif kind == "healed":
            self.healing -= 1
            self.members += 1


def simulate(job: Job, run: Run, seed: int) -> Result:
    """Every paid GPU-second of `job` over `run.period_s`, by bucket; deterministic for a seed."""
    return _Sim(job, run).simulate(seed)


def interruptions_per_node_second(job: Job, mode: Mode, kueue: Kueue = "none") -> float:
    """What stops the whole job, per training node: every cause under `restart`, job-scope ones under `live`,
    and under Kueue's FailFast every cause whose node leaves the job's assignment."""
    return sum(
        e.cause.per_node_second
        for e in job.effects
        if mode == "restart" or e.scope == "job" or (kueue == "fail-fast" and e.kueue_s is not None)
    )
