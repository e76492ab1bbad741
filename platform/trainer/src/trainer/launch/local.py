"""Run a training job here: a torchft Lighthouse in this process, ``ft.group_size`` processes per replica group.

For development and tests (gloo on CPU). Each group's ranks rendezvous through a store of
their own (a fresh port per start), so groups never share a collective. A group dies whole: when
one rank exits with an error (a crash, SIGKILL), its other ranks are killed, and the group
is started again when ft.restart_failed is set; its new processes join the
quorum and heals from a live peer (with ft.enabled=false: no Lighthouse, and
it resumes from its newest durable checkpoint), except after exit 2 (refused to start
on its checkpoint directory) or 3 (non-finite loss or gradients persisted):
those are final, and the run exits with that code. The run's goodput is the sum of its
groups' reports, written to <report_dir>/<run>/goodput.json.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from trainer.config import MAX_RESTARTS, Config, to_dict
from trainer.ft.manager import start_lighthouse
from trainer.launch import forked
from trainer.launch.forked import Forked
from trainer.launch.interrupt import pause
from trainer.launch.process import EXIT_NONFINITE, EXIT_REFUSED
from trainer.observe.console import Console, group_log, native_stderr_to, outcome_line
from trainer.observe.goodput import combine, dumps
from trainer.observe.runs import committed_target, final_reports, inner_per_commit, run_dir

if TYPE_CHECKING:
    from trainer.rl.launch import RLSide

log = logging.getLogger("trainer")


def spawn(config_json: Path, group: int, address: str, cfg: Config) -> list[Forked]:
    """Start the ``ft.group_size`` ranks of replica group ``group``, with a store of their own (a fresh port)."""
    size = cfg.ft.group_size
    # The ranks share this machine's cores: each gets its share of torch's threads. With torch's default (all
    # cores each) ranks that compute in step with each other spin against each other, 2-3x slower on 2 cores.
    threads = str(max(1, len(os.sched_getaffinity(0)) // (cfg.ft.replica_groups * size)))
    port = str(_free_port()) if size > 1 else ""
    procs = []
    for rank in range(size):
        # torchft's INFO logs (every quorum) and everything else the ranks print go to the group's log file.
        env = forked.SERVER_ENVIRON | {"OMP_NUM_THREADS": threads} | dict(os.environ)
        if size > 1:  # torch.distributed's rendezvous inside the group (distributed/group.py)
            group_env = {"MASTER_ADDR": "localhost", "MASTER_PORT": port, "RANK": str(rank), "LOCAL_RANK": str(rank)}
            env |= group_env | {"WORLD_SIZE": str(size)}
        args = [str(config_json), str(group), address]
        procs.append(forked.start("trainer.launch.worker_main", args, env, group_log(config_json.parent, group)))
    return procs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port: int = s.getsockname()[1]
        return port


def _stop(procs: list[Forked]) -> None:
    """A group lives and dies whole: its other ranks would only hang in the group's next collective."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    for proc in procs:
        proc.wait()


def _exit_code(procs: list[Forked]) -> int | None:
    """The group's exit code: None while it runs; a rank's failure as soon as one fails; 0 when all finished."""
    codes = [p.poll() for p in procs]
    failed = [c for c in codes if c not in (None, 0)]
    final = [c for c in failed if c in (EXIT_REFUSED, EXIT_NONFINITE)]
    if final or failed:
        return (final or failed)[0]
    return None if None in codes else 0


def launch(cfg: Config) -> int:
    out = run_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    try:
        with native_stderr_to(out / "lighthouse.log"):  # the Lighthouse logs from Rust to fd 2
            return _launch(cfg, out)
    finally:
        forked.stop()


def _launch(cfg: Config, out: Path) -> int:
    started = time.time()
    console = Console(out, committed_target(cfg), inner_per_step=inner_per_commit(cfg))
    why = ""  # why the run stopped or failed, for the final report
    config_json = out / "config.json"
    rl = _rl_side(cfg, out)  # RL: the controller here, generators beside the groups (trainer/rl/launch.py)
    config_json.write_text(json.dumps(to_dict(rl.config(cfg) if rl else cfg), indent=2))
    server = start_lighthouse(cfg)
    address = server.address()
    (out / "lighthouse").write_text(address)
    procs: dict[int, list[Forked]] = {}
    with _ended_on_interrupt(procs, rl, server):
        procs |= {g: spawn(config_json, g, address, cfg) for g in range(cfg.ft.replica_groups)}
        if rl:
            from trainer.rl.launch import Processes

            rl.start(Processes(out, config_json, threads=_generator_threads(cfg)))
        _write_pids(out, procs)
        restarts = dict.fromkeys(procs, 0)
        due: dict[int, float] = {}  # dead groups -> when to start them again
        failed = False
        final = 0  # a group's exit code that no restart can fix: the run's exit code
        while procs or due:
            pause(0.2)
            console.poll()
            if rl and rl.poll():
                due.clear()  # the run's last step committed: a dead group is not replaced
            for group, when in list(due.items()):
                if time.monotonic() >= when:
                    del due[group]
                    procs[group] = spawn(config_json, group, address, cfg)
                    _write_pids(out, procs)
            for group, ranks in list(procs.items()):
                code = _exit_code(ranks)
                if code is None:
                    continue
                _stop(ranks)  # a rank that died takes its whole group down
                del procs[group]
                if rl:
                    rl.group_gone(group)
                if code == 0:
                    continue
                verdict = after_death(cfg.ft.restart_failed, restarts[group], code, cfg.ft.max_restarts)
                why = why or _why(verdict, group, code, restarts[group], out)
                if verdict == "final":
                    log.error("replica group %d exited with %d: final, not restarting it", group, code)
                    final = final or code
                elif verdict == "restart":
                    restarts[group] += 1
                    delay, limit = cfg.ft.restart_delay_s, cfg.ft.max_restarts
                    console.restarted(group, f"exited with {code}", delay, restarts[group], limit)
                    due[group] = time.monotonic() + cfg.ft.restart_delay_s
                else:
                    log.error("replica group %d exited with %d", group, code)
                    failed = True
    server.shutdown()
    console.poll()
    code, outcome = _outcome(final, failed, why, rl)
    _summarize(cfg, out, outcome, started, sum(restarts.values()), rl)
    return code


def _generator_threads(cfg: Config) -> int:
    """Each generator's share of the cores: every rank and generator of the run shares them."""
    processes = cfg.ft.replica_groups * cfg.ft.group_size + cfg.rl.generators
    return max(1, len(os.sched_getaffinity(0)) // processes)


@contextmanager
def _ended_on_interrupt(procs: dict[int, list[Forked]], rl: RLSide | None, server: Any) -> Iterator[None]:
    """Ctrl-C: nothing of the run may outlive its launcher (train.py says how to resume)."""
    try:
        yield
    except KeyboardInterrupt:
        for ranks in procs.values():
            _stop(ranks)
        if rl:
            rl.interrupted()
        server.shutdown()
        raise


def _outcome(final: int, failed: bool, why: str, rl: RLSide | None) -> tuple[int, str]:
    """The run's exit code and the outcome its final line and summary give."""
    code = final or (1 if failed else 0)
    outcome = "completed" if code == 0 else f"{'stopped' if final else 'failed'}: {why}"
    return rl.outcome(code, outcome) if rl else (code, outcome)


def _summarize(cfg: Config, out: Path, outcome: str, started: float, restarts: int, rl: RLSide | None) -> None:
    """goodput.json and the final console line: this launch's groups only, never an earlier run's."""
    summary = combine(final_reports(out, since=started)) | {"restarts": restarts, "outcome": outcome}
    summary = rl.finish(summary) if rl else summary
    (out / "goodput.json").write_text(dumps(summary))
    print(outcome_line(cfg.run.name, outcome, summary, out), flush=True)


def after_death(
    restart_failed: bool, restarts: int, code: int, limit: int = MAX_RESTARTS
) -> Literal["restart", "final", "fail"]:
    """What a group that ended with ``code`` (non-zero) gets: a restart, or the run ends (final: no restart can help)."""
    if code in (EXIT_REFUSED, EXIT_NONFINITE):
        return "final"
    return "restart" if restart_failed and restarts < limit else "fail"


def _why(verdict: str, group: int, code: int, restarts: int, out: Path) -> str:
    """The run's reason to stop, for its final line; "" for a group that will be restarted."""
    if verdict == "restart":
        return ""
    after = f" after {restarts} restart(s)" if verdict == "fail" else ""
    return f"replica group {group} exited with {code}{after} ({group_log(out, group)})"


def _rl_side(cfg: Config, out: Path) -> RLSide | None:
    if cfg.run.mode != "rl":
        return None
    from trainer.rl.launch import RLSide

    return RLSide(cfg, out)


def _write_pids(out: Path, procs: dict[int, list[Forked]]) -> None:
    """Which process is which group (pids.json: rank 0's; ranks.json: every rank's): for operators, tests, benchmarks."""
    (out / "pids.json").write_text(json.dumps({g: p[0].pid for g, p in procs.items()}))
    (out / "ranks.json").write_text(json.dumps({g: [r.pid for r in p] for g, p in procs.items()}))
