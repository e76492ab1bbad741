"""The local launcher's RL side: the controller in this process, ``rl.generators`` generator processes beside the groups.

launch/local.py starts the replica groups as for pretraining and calls this: ``config`` (the groups' and the
generators' configuration, with the controller's address), ``poll`` (a generator that exited is gone
to the controller, which issues its prompts again, and starts again after ``ft.restart_delay_s`` as a
new generator; after ``rl.max_restarts`` exits in a row without a kept answer, or an exit 2 (it refused to
start: its engine is missing), the run stops with its last error line), ``outcome`` (why the run stopped early,
and its exit code), ``group_gone`` (a dead group serves no weights), ``finish`` (the generators' goodput and
the buffer's counters in the run's summary). Each committed step is one console line and one record in
``<run>/rl.jsonl`` (what the tests read). A step due for held-out evaluation (evaluation.py: one group
evaluates it on a thread) waits for its accuracy before its line goes out, so the line carries it; a
later step's commit sends it without (its accuracy, when it comes, is a line of its own).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Protocol

from contract.metrics import GENERATOR_STATES
from trainer.config import Config
from trainer.launch import forked
from trainer.launch.forked import Forked
from trainer.launch.process import EXIT_REFUSED, EXIT_STOPPED
from trainer.rl.controller import Committed, Controller
from trainer.rl.evaluation import due
from trainer.rl.grpo import make_task
from trainer.rl.metrics import RLMetrics
from trainer.rl.report import GeneratorTime, StepReport, TrainerTime, eta, step_line, with_generators
from trainer.rl.service import Service

log = logging.getLogger("trainer")


class Runner(Protocol):
    """Where generator processes run: here (forked processes) or on a Ray cluster (actors on generator pods)."""

    def spawn(self, index: int, incarnation: int) -> int | None:
        """Start generator ``index``; its pid when it runs here."""
        ...

    def exited(self, index: int) -> int | None:
        """Its exit code once it ended (a crash or a lost node included), else None."""
        ...

    def stop(self, deadline_s: float) -> None:
        """Let the ones still running see "done" until the deadline, then end them."""
        ...

    def last_error(self, index: int) -> str:
        """The last line generator ``index`` wrote before it exited (its error), "" when none."""
        ...


class Processes:
    """Generators as processes of this machine (the local launcher), logging to <run>/generator-<i>.log.

    Each gets ``threads`` torch threads (OMP_NUM_THREADS, unless the environment sets it), its share of the cores
    beside the ranks: with torch's default (every core) a generator computing beside the trainer's ranks spun
    on 2 busy cores, a lease 15-30x slower than with one thread (issue 41, measured: 830-1,840 ms against 50-59 ms).
    """

    def __init__(self, out: Path, config_json: Path, threads: int = 1) -> None:
        self.out, self.config_json, self.threads = out, config_json, threads
        self.procs: dict[int, Forked] = {}

    def spawn(self, index: int, incarnation: int) -> int | None:
        env = {"OMP_NUM_THREADS": str(self.threads)} | dict(os.environ)
        args = [str(self.config_json), str(index), str(incarnation)]
        log = self.out / f"generator-{index}.log"
        self.procs[index] = forked.start("trainer.rl.generator_main", args, env, log)
        return self.procs[index].pid

    def exited(self, index: int) -> int | None:
        return self.procs[index].poll()

    def last_error(self, index: int) -> str:
        return last_line(self.out / f"generator-{index}.log")

    def stop(self, deadline_s: float) -> None:
        deadline = time.monotonic() + deadline_s
        while any(p.poll() is None for p in self.procs.values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()


class RLSide:
    def __init__(self, cfg: Config, out: Path, *, host: str = "localhost", advertise: str = "") -> None:
        self.cfg, self.out = cfg, out
        tokenizer = None
        if cfg.rl.hf_checkpoint and "://" not in cfg.rl.hf_checkpoint:
            from trainer.rl.hf import load_tokenizer

            tokenizer = load_tokenizer(cfg.rl.hf_checkpoint, cfg.model.vocab)
        task = make_task(cfg.rl, cfg.model.vocab, tokenizer)
        self.controller = Controller(
            cfg.rl, task, vocab=cfg.model.vocab, steps=cfg.run.steps, context=cfg.model.seq_len
        )  # seq_len: where a vLLM engine (max_model_len) ends a completion
        self.metrics = RLMetrics(cfg.run.name, cfg.ft.region, -1, max_policy_age=cfg.rl.max_policy_age)
        self.time: dict[str, GeneratorTime] = {}
        self.trainer = TrainerTime()
        self.records = (out / "rl.jsonl").open("a")
        self.service = Service(
            self.controller, host=host, advertise=advertise, on_commit=self._committed, on_lease=self._booked,
            on_greedy=self._evaluated, metrics=self.metrics,
        )  # fmt: skip
        self.lines = threading.Lock()  # commits and evaluations arrive on the service's threads
        self.pending: dict[int, tuple[StepReport, Committed]] = {}  # due steps waiting for their evaluation
        self.runner: Runner | None = None
        self.running: set[int] = set()
        self.incarnation: dict[int, int] = {}
        self.due: dict[int, float] = {}
        self.failures: dict[int, int] = {}  # generator index -> exits in a row without a kept answer
        self.stop_code = 0  # the run's exit code once ``controller.stopped`` says why it cannot go on
        self.started = time.monotonic()
        self.first_commit: tuple[float, int] | None = None  # (when, step): the pace the ETA assumes
        self.announced = False
        self.asked: set[str] = set()  # generators that asked for work (each said once on the console)

    def config(self, cfg: Config) -> Config:
        """The configuration every process of the run reads: with the controller's address."""
        return replace(cfg, rl=replace(cfg.rl, controller=self.service.address))

    def start(self, runner: Runner) -> None:
        self.runner = runner
        for index in range(self.cfg.rl.generators):
            self._spawn(index)
        groups = self.cfg.ft.replica_groups
        say(f"rl: controller at {self.service.address}; started {self.cfg.rl.generators} generator(s) and "
            f"{groups} trainer group(s); waiting for a trainer group to load its checkpoint or initial weights")  # fmt: skip

    def outcome(self, code: int, outcome: str) -> tuple[int, str]:
        """The run's exit code and outcome: the launcher's, unless its groups ended cleanly because the run
        stopped (no batch: EXIT_STOPPED; a generator that keeps failing: 1; one that refused to start: 2)."""
        why = self.controller.stopped
        if code or not why:
            return code, outcome
        code = self.stop_code or EXIT_STOPPED
        return code, f"{'failed' if code == 1 else 'stopped'}: {why}"

    def _spawn(self, index: int) -> None:
        assert self.runner is not None
        incarnation = self.incarnation.get(index, -1) + 1
        self.incarnation[index] = incarnation
        pid = self.runner.spawn(index, incarnation)
        self.running.add(index)
        self._record("generator_started", generator=f"generator-{index}.{incarnation}", pid=pid)

    def poll(self) -> bool:
        """Generators that exited are gone; they start again once their delay passed. True: the run is done."""
        assert self.runner is not None
        c = self.controller
        if c.started_from is not None and not self.announced:
            self.announced = True
            self._record("controller_started", **c.started_from)
            self._started_lines(c.started_from)
        for name in sorted(self.service.call(lambda: set(c.members)) - self.asked):
            self.asked.add(name)
            say(f"rl: {name} is asking for work")
        for index in sorted(self.running):
            code = self.runner.exited(index)
            if code is None:
                continue
            self.running.discard(index)
            self._exited(index, code)
        waiting = self.service.call(c.waiting)
        if waiting is not None:
            say(waiting)
            self._record("waiting", line=waiting)
        for index, when in list(self.due.items()):
            if time.monotonic() >= when and not self.controller.done:
                del self.due[index]
                self._spawn(index)
        return self.controller.done

    def _exited(self, index: int, code: int) -> None:
        """Generator ``index`` ended: its prompts go out again; it starts again, unless it keeps failing."""
        assert self.runner is not None
        name = f"generator-{index}.{self.incarnation[index]}"
        lost = self.service.call(self.controller.generator_gone, name)
        self._record("generator_exited", generator=name, code=code, reissued=lost)
        if self.controller.done:
            return
        kept = name in self.controller.delivered
        self.failures[index] = 0 if kept else self.failures.get(index, 0) + 1
        verdict = generator_verdict(code, self.failures[index], self.cfg.rl.max_restarts)
        if verdict == "restart":
            delay, failures = self.cfg.ft.restart_delay_s, self.failures[index]
            self.due[index] = time.monotonic() + delay
            row = f" ({failures} of {self.cfg.rl.max_restarts} in a row without an answer kept)" if failures else ""
            say(f"rl: {name} exited with {code}; restarting it in {delay:g} s{row}")
            return
        error = self.runner.last_error(index) or "no output"
        if verdict == "refused":
            why = f"{name} refused to start (exit {code}): {error}"
        else:
            why = f"{name} exited {self.failures[index]} time(s) in a row without an answer kept (exit {code}; " \
                  f"rl.max_restarts={self.cfg.rl.max_restarts}): {error}"  # fmt: skip
        self.stop_code = EXIT_REFUSED if verdict == "refused" else 1
        self.service.call(self.controller.stop, why)

    def _started_lines(self, started_from: dict[str, Any]) -> None:
        version, pending = started_from["version"], len(started_from["pending"])
        where = f"resumed at step {version} ({pending} prompt(s) to issue again)" if version else "starting at step 0"
        say(f"rl: a trainer group is up, {where}; waiting for the generators' first scored groups")

    def interrupted(self) -> None:
        """Ctrl-C: end the generators now and stop serving (the launcher ends the groups)."""
        if self.runner is not None:
            self.runner.stop(0)
        self.service.close()
        self.records.close()

    def group_gone(self, group: int) -> None:
        self.service.call(self.controller.group_gone, group)

    def finish(self, summary: dict[str, Any]) -> dict[str, Any]:
        if self.runner is not None:
            self.runner.stop(10)  # they see "done" at their next ask
        for committed in self.service.call(self.controller.flush):  # steps whose last reports never came
            self._committed(committed)
        self.service.close()
        with self.lines:
            self._flush(None)  # an evaluation that never came (its group died): the step's line without it
        refused = {f"{g}/{reason}": n for (g, reason), n in sorted(self.controller.refusals.items())}
        counters = asdict(self.controller.buffer.counters) | {"rejected_results": self.controller.rejected}
        counters["refused_answers"] = refused
        self._record("finished", **counters)
        self.records.close()
        reports = [t.report() for t in self.time.values()]
        return with_generators(summary, reports) | {"rl": counters, "trainer": self.trainer.report()}

    def _booked(self, generator: str, seconds: dict[str, float]) -> None:
        if generator not in self.time:  # its first ask: imported, engine built (start-up, scripts/bench_rl_startup.py)
            self._record("generator_ready", generator=generator)
        time_ = self.time.setdefault(generator, GeneratorTime())
        for state, value in seconds.items():
            if state in GENERATOR_STATES and 0 <= value < 1e6:
                time_.add(state, value)
                self.metrics.generator(state, value, generator)

    def _committed(self, c: Committed) -> None:
        t, now = c.trainer, time.monotonic()
        self.first_commit = self.first_commit or (now, c.step)
        report = StepReport(
            step=c.step, steps=self.cfg.run.steps, reward=c.reward,
            version=c.step - 1, ages=c.ages, generated_tokens=c.window.generated_tokens,
            trained_tokens=c.lengths.tokens, generate_seconds=c.window.generate_seconds,
            train_seconds=_number(t.get("train_seconds")) or 0.0, sync_seconds=_number(t.get("sync_seconds")) or 0.0,
            reissued=c.window.reissued, refused=c.window.refused, policy=c.policy, lengths=c.lengths,
            elapsed_s=now - self.started, eta_s=eta(now, self.first_commit, c.step, self.cfg.run.steps),
        )  # fmt: skip
        with self.lines:
            self._flush(c.step)
            if due(c.step, self.cfg.rl.eval_every, self.cfg.run.steps):
                self.pending[c.step] = (report, c)
            else:
                self._show(report, c)

    def _evaluated(self, group: int, step: int, greedy: float, seconds: float) -> None:
        with self.lines:
            self._record("greedy", step=step, group=group, greedy=greedy, seconds=round(seconds, 3))
            self.metrics.evaluated(greedy)
            if step in self.pending:
                report, c = self.pending.pop(step)
                self._show(replace(report, greedy=greedy), c)
            elif step == 0:  # a fresh run's policy before training (policy.started)
                say(f"rl baseline  greedy {greedy:.2f}  (held out, at step 0 before training; {seconds:.2f} s)")
            else:  # its step's line went out already: the evaluation took longer than a step
                say(f"rl greedy {greedy:.2f} at step {step} (group {group}, {seconds:.2f} s)")

    def _flush(self, before: int | None) -> None:
        """The lines of due steps before ``before`` (None: all) still waiting for their evaluation, without it."""
        for step in sorted(s for s in self.pending if before is None or s < before):
            self._show(*self.pending.pop(step))

    def _show(self, report: StepReport, c: Committed) -> None:
        say(step_line(report))
        self.trainer.add(report.train_seconds, max(0.0, _number(c.trainer.get("wait_seconds")) or 0.0))
        self.metrics.observe(report)
        counters = self.controller.buffer.counters
        self._record(
            "step", step=c.step, ages=list(c.ages), reward=c.reward, greedy=report.greedy, reissued=c.window.reissued,
            refused=c.window.refused, completions=c.window.completions, truncated=c.window.truncated,
            trained_tokens=c.lengths.tokens, lengths=c.lengths.to_json(),
            policy=None if c.policy is None else c.policy.to_json(),
            age_violations=counters.age_violations, max_sampled_age=counters.max_sampled_age,
            issued=counters.issued, evicted=counters.dropped_stale,  # the share evicted for age so far
        )  # fmt: skip

    def _record(self, kind: str, **fields: Any) -> None:
        self.records.write(json.dumps({"event": kind, "time": round(time.time(), 3), **fields}) + "\n")
        self.records.flush()


def generator_verdict(code: int, failures: int, max_restarts: int) -> str:
    """What a generator that exited with ``code`` gets: "restart", "refused" (exit 2: its engine cannot run here,
    final) or "failed" (``failures`` exits in a row without a kept answer, past ``max_restarts``)."""
    if code == EXIT_REFUSED:
        return "refused"
    return "restart" if failures <= max_restarts else "failed"


def last_line(path: Path, tail: int = 8192) -> str:
    """The last non-empty line of a log file (its error, when the process died of one); "" if none."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - tail))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


_SAYING = threading.Lock()  # lines come from the launcher's loop and the service's threads: never interleaved


def say(line: str) -> None:
    """One console line of the run (the launcher's stdout, as the step lines), written whole."""
    with _SAYING:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
