"""A week of idle-node sweeps on the simulated cluster (warden.simulate), with jobs and latent faults.

Latent faults (a GPU that fails only the deep check, a NIC whose bandwidth
only the multi-node check finds) raise no signal: only a deep check finds
them. Jobs (gangs of 1-32 nodes, 1-24 h) arrive per pool and take idle
in-service nodes; when only nodes being swept are left, the job takes them
and their sweeps are preempted (as Kueue preempts the lowest priority). Each
step Warden's real round (controller.run_round, with running sweeps counted
against the budget) and its real sweep plan (warden.sweep.plan) run; finished
checks are written to the node as the real annotation (contract.health), so
a failure reaches the policy as the real signal (observe.deep_check_signal).
Deterministic for a seed.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from dataclasses import dataclass, field

from contract import health, names
from warden.controller import NodeView, allowed_out, counts_out, run_round
from warden.observe import deep_check_signal, last_deep_check
from warden.policy import Policy
from warden.simulate import SimCluster, SimNode
from warden.state import Facts, Record
from warden.sweep import Candidate, SweepJob, plan

HOUR = 3600.0
START = 30 * 86400.0  # the simulation's first instant: past checks need times after 1970 to be read as checks
JOB_SIZES = (1, 2, 4, 8, 16, 32)


@dataclass
class Job:
    pool: str
    size: int
    duration: float
    nodes: list[str] = field(default_factory=list)
    ends: float = 0.0


@dataclass
class Sweep:
    node: str
    pool: str
    started: float
    preempted: bool = False


@dataclass
class FleetWeek:
    sim: SimCluster
    policy: Policy
    sweep_s: float = 900.0  # a level-2 deep check
    utilization: float = 0.6  # of each pool's nodes, by the jobs' arrival rate
    max_job_s: float = 24 * HOUR
    rng: random.Random = field(default_factory=lambda: random.Random(21))
    latent: dict[str, tuple[str, float]] = field(default_factory=dict)  # node -> (gpu|nic, when it appeared)
    check_of: dict[str, health.DeepCheck | None] = field(default_factory=dict)  # node -> its annotation, as read
    found: dict[str, float] = field(default_factory=dict)  # node -> how long after its fault a check failed
    job_of: dict[str, Job] = field(default_factory=dict)
    idle_since: dict[str, float] = field(default_factory=dict)
    queue: dict[str, deque[Job]] = field(default_factory=dict)
    sweeps: dict[str, Sweep] = field(default_factory=dict)
    preemptions: list[tuple[str, float]] = field(default_factory=list)  # sweeps a job preempted: (node, when)
    starts: list[tuple[str, float]] = field(default_factory=list)  # sweeps started: (node, when)
    displaced_jobs: int = 0  # jobs a sweep took a node from: must stay 0
    over_budget: int = 0  # pool-instants with more out of service (sweeps included) than allowed
    max_check_age: float = 0.0  # the oldest last check of an in-service node seen at any instant

    @staticmethod
    def build(pools: dict[str, int], policy: Policy, step_s: float = 300.0, seed: int = 21) -> FleetWeek:
        sim = SimCluster.build(pools, policy)
        sim.step_s, sim.now = step_s, START
        week = FleetWeek(sim, policy, rng=random.Random(seed))
        for node in sim.nodes.values():  # steady state: last checks spread over the past cadence
            week._record(node, "sweep", "pass", START - week.rng.uniform(0, policy.sweep_every_s))
            node.pods = 0
            week.idle_since[node.name] = START
        week.queue = {pool: deque() for pool in pools}
        return week

    def inject_latent(self, count: int) -> list[str]:
        """`count` latent faults on distinct random nodes, half GPUs, half NICs; both fail only a deep check."""
        chosen = self.rng.sample(sorted(self.sim.nodes), count)
        for i, name in enumerate(chosen):
            self.latent[name] = ("gpu" if i % 2 else "nic", self.sim.now)
        return chosen

    # The world

    def _record(self, node: SimNode, kind: health.CheckKind, verdict: health.Verdict, at: float) -> None:
        failures: tuple[health.Failure, ...] = ()
        if verdict == "fail":  # what the deep check reports for each kind of latent fault
            gpu = self.latent.get(node.name, ("gpu", 0.0))[0] == "gpu"
            failures = (
                health.Failure(check="dcgm_diag", gpu=0, evidence="memory test")
                if gpu
                else health.Failure(check="nccl_multinode"),
            )
        check = health.DeepCheck(time=at, kind=kind, verdict=verdict, failures=failures)
        node.annotations[names.DEEP_CHECK_ANNOTATION] = health.dumps(check)
        self.check_of[node.name] = last_deep_check(node.annotations)  # through the real reader, once per write

    def _in_service(self, name: str, record: Record) -> bool:
        return record.phase == "healthy" and not self.sim.nodes[name].cordoned

    def _arrivals(self) -> None:
        sizes = Counter(n.pool for n in self.sim.nodes.values())
        mean_size, mean_s = sum(JOB_SIZES) / len(JOB_SIZES), (HOUR + self.max_job_s) / 2
        for pool, size in sizes.items():
            rate = self.utilization * size * self.sim.step_s / (mean_size * mean_s)  # jobs per step
            while rate > 0:
                if self.rng.random() < min(rate, 1.0):
                    job_size = min(self.rng.choice(JOB_SIZES), size // 4)
                    self.queue[pool].append(Job(pool, job_size, self.rng.uniform(HOUR, self.max_job_s)))
                rate -= 1.0

    def _schedule(self, records: dict[str, Record]) -> None:
        now = self.sim.now
        for pool, waiting in self.queue.items():
            if not waiting:
                continue
            free = [
                n.name
                for n in self.sim.nodes.values()
                if n.pool == pool and n.name not in self.job_of and self._in_service(n.name, records[n.name])
            ]
            self.rng.shuffle(free)  # placement knows nothing of sweeps: a job may land on a node being swept
            while waiting and len(free) >= waiting[0].size:
                job = waiting.popleft()
                job.nodes, job.ends, free = free[: job.size], now + job.duration, free[job.size :]
                for name in job.nodes:
                    sweep = self.sweeps.get(name)
                    if sweep is not None and not sweep.preempted:
                        sweep.preempted = True  # the job preempts the sweep (Kueue: the lowest priority)
                        self.preemptions.append((name, now))
                    self.job_of[name] = job
                    self.idle_since.pop(name, None)
                    self.sim.nodes[name].pods = 1

    def _finish_jobs(self) -> None:
        for name, job in list(self.job_of.items()):
            if self.sim.now >= job.ends or self.sim.nodes[name].pods == 0:  # ended, or evicted by a drain
                del self.job_of[name]
                self.idle_since[name] = self.sim.now
                self.sim.nodes[name].pods = 0

    # Warden

    def _views(self, records: dict[str, Record]) -> list[NodeView]:
        out = []
        for node in self.sim.nodes.values():
            if not node.ready and self.sim.now >= node.down_until:
                node.ready = True
            record = records[node.name]
            signal = deep_check_signal(self.check_of.get(node.name))
            signals = (signal,) if signal is not None and record.phase in ("healthy", "suspect") else ()
            facts = Facts(ready=node.ready, boot_id=str(node.boot), pods=node.pods, preflight=node.preflight)
            out.append(NodeView(node.name, node.pool, record, facts, signals))
        return out

    def step(self) -> None:
        sim, now = self.sim, self.sim.now
        self._finish_jobs()
        records = {n.name: Record.from_annotations(n.annotations) for n in sim.nodes.values()}
        self._arrivals()
        self._schedule(records)
        views = self._views(records)
        active = [s for s in self.sweeps.values() if not s.preempted or s.node not in self.job_of]
        running = Counter(s.pool for s in active)
        busy = {v.name for v in views if v.signals or v.record.phase != "healthy"}
        decided = run_round(views, self.policy, now, only=busy, sweeping=running)
        for name, decision in decided.decisions.items():
            node = sim.nodes[name]
            labels, annotations = decision.record.to_annotations()
            node.annotations.update(labels | annotations)
            for command in decision.commands:
                self._carry_out(node, command.verb)
            records[name] = decision.record
        out = Counter(v.pool for v in views if counts_out(records[v.name]))
        self._sweep(records, out, decided.blocked_pools)
        self._audit(records)
        sim.now += sim.step_s

    def _carry_out(self, node: SimNode, verb: str) -> None:
        if verb == "preflight":  # probation's burn-in: the deep check finds a latent fault too
            node.touched[verb] += 1
            node.preflight = "fail" if node.fault is not None or node.name in self.latent else "pass"
            return
        if verb == "replace":
            self.latent.pop(node.name, None)  # a new machine
        if verb == "uncordon":
            self.sim._carry_out(node, verb)
            node.pods = 0  # back, idle
            self.idle_since[node.name] = self.sim.now
            return
        self.sim._carry_out(node, verb)

    def _sweep(self, records: dict[str, Record], out: Counter[str], blocked: Counter[str]) -> None:
        now = self.sim.now
        jobs = []
        for sweep in self.sweeps.values():
            if sweep.preempted:
                state = "waiting"  # suspended by Kueue, its pod gone
            elif now - sweep.started >= self.sweep_s:
                state = "fail" if sweep.node in self.latent else "pass"
            else:
                state = "running"
            jobs.append(SweepJob(sweep.node, sweep.pool, state, sweep.started, sweep.node))  # type: ignore[arg-type]
        candidates = []
        for name, node in self.sim.nodes.items():
            check = self.check_of.get(name)
            idle = self.idle_since.get(name) if name not in self.job_of else None
            candidates.append(
                Candidate(name, node.pool, self._in_service(name, records[name]), idle, check.time if check else None)
            )
        decided = plan(candidates, jobs, out, blocked, self.policy, now)
        for job in decided.finished:
            self._record(self.sim.nodes[job.node], "sweep", "pass" if job.state == "pass" else "fail", now)
            if job.state == "fail":
                self.found.setdefault(job.node, now - self.latent[job.node][1])
            del self.sweeps[job.node]
        for job in decided.give_up:
            del self.sweeps[job.node]
        for name in decided.start:
            if name in self.job_of:
                self.displaced_jobs += 1  # a sweep on a node a job holds: must never happen
            self.sweeps[name] = Sweep(name, self.sim.nodes[name].pool, now)
            self.starts.append((name, now))

    def _audit(self, records: dict[str, Record]) -> None:
        sizes = Counter(n.pool for n in self.sim.nodes.values())
        out = Counter(self.sim.nodes[n].pool for n, r in records.items() if counts_out(r))
        out.update(s.pool for s in self.sweeps.values() if not s.preempted)
        for pool, size in sizes.items():
            self.over_budget += out[pool] > allowed_out(size, self.policy.unhealthy_share_limit)
        for name in self.sim.nodes:
            check = self.check_of.get(name)
            if check is not None and self._in_service(name, records[name]):
                self.max_check_age = max(self.max_check_age, self.sim.now - check.time)

    def run_for(self, duration: float) -> None:
        end = self.sim.now + duration
        while self.sim.now < end:
            self.step()
