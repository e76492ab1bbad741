"""Run a training job here: a torchft Lighthouse in this process, one process per replica group.

For development and tests (gloo on CPU). A group that dies (a crash, SIGKILL)
is started again when ft.restart_failed is set; the new process joins the
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
import subprocess
import sys
import time
from pathlib import Path

from trainer.config import Config, to_dict
from trainer.console import Console, group_log, native_stderr_to, outcome_line
from trainer.ft import start_lighthouse
from trainer.goodput import combine, dumps
from trainer.runs import final_reports, run_dir
from trainer.worker import EXIT_NONFINITE, EXIT_REFUSED

log = logging.getLogger("trainer")
MAX_RESTARTS = 3  # per group: a group that keeps dying is a bug, not a fault to ride out


def spawn(config_json: Path, group: int, address: str, groups: int) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "trainer.worker_main", str(config_json), str(group), address]
    # The groups share this machine's cores: each gets its share of torch's threads. With torch's default (all
    # cores each) groups that compute in step with each other spin against each other, 2-3x slower on 2 cores.
    threads = str(max(1, len(os.sched_getaffinity(0)) // groups))
    # torchft's INFO logs (every quorum) and everything else the group prints go to its log file, not the console.
    env = {"RUST_LOG": "info", "OMP_NUM_THREADS": threads} | dict(os.environ)
    with group_log(config_json.parent, group).open("ab") as log:
        return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)


def launch(cfg: Config) -> int:
    out = run_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    with native_stderr_to(out / "lighthouse.log"):  # the Lighthouse logs from Rust to fd 2
        return _launch(cfg, out)


def _launch(cfg: Config, out: Path) -> int:
    started = time.time()
    console = Console(out, committed_target(cfg))
    why = ""  # why the run stopped or failed, for the final report
    config_json = out / "config.json"
    config_json.write_text(json.dumps(to_dict(cfg), indent=2))
    server = start_lighthouse(cfg)
    address = server.address()
    (out / "lighthouse").write_text(address)
    procs = {g: spawn(config_json, g, address, cfg.ft.replica_groups) for g in range(cfg.ft.replica_groups)}
    _write_pids(out, procs)
    restarts = dict.fromkeys(procs, 0)
    due: dict[int, float] = {}  # dead groups -> when to start them again
    failed = False
    final = 0  # a group's exit code that no restart can fix: the run's exit code
    while procs or due:
        time.sleep(0.2)
        console.poll()
        for group, when in list(due.items()):
            if time.monotonic() >= when:
                del due[group]
                procs[group] = spawn(config_json, group, address, cfg.ft.replica_groups)
                _write_pids(out, procs)
        for group, proc in list(procs.items()):
            code = proc.poll()
            if code is None:
                continue
            del procs[group]
            if code == 0:
                continue
            if code in (EXIT_REFUSED, EXIT_NONFINITE):
                log.error("replica group %d exited with %d: final, not restarting it", group, code)
                final = final or code
                why = why or f"replica group {group} exited with {code} ({group_log(out, group)})"
                continue
            if cfg.ft.restart_failed and restarts[group] < MAX_RESTARTS:
                restarts[group] += 1
                log.warning(
                    "replica group %d exited with %d: starting it again in %.0f s (%d)",
                    group, code, cfg.ft.restart_delay_s, restarts[group],
                )  # fmt: skip
                due[group] = time.monotonic() + cfg.ft.restart_delay_s
            else:
                log.error("replica group %d exited with %d", group, code)
                failed = True
                why = (
                    why
                    or f"replica group {group} exited with {code} after {restarts[group]} restart(s) ({group_log(out, group)})"
                )
    server.shutdown()
    console.poll()
    code = final or (1 if failed else 0)
    outcome = "completed" if code == 0 else f"{'stopped' if final else 'failed'}: {why}"
    reports = final_reports(out, since=started)  # this launch's groups only, never an earlier run's
    summary = combine(reports) | {"restarts": sum(restarts.values()), "outcome": outcome}
    (out / "goodput.json").write_text(dumps(summary))
    print(outcome_line(cfg.run.name, outcome, summary, out), flush=True)
    return code


def committed_target(cfg: Config) -> int:
    """The committed step the run ends at (a DiLoCo step is a sync: sync_every / fragments inner steps)."""
    per = cfg.optim.sync_every // cfg.optim.fragments if cfg.optim.algorithm == "diloco" else 1
    return -(-cfg.run.steps // per)


def _write_pids(out: Path, procs: dict[int, subprocess.Popen[bytes]]) -> None:
    """Which process is which group: for operators, tests and the benchmark that kill one."""
    (out / "pids.json").write_text(json.dumps({g: p.pid for g, p in procs.items()}))
