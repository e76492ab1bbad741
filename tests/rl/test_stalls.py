"""No silent stalls, and the researcher's first hour (issue 41), without processes: a step that can never form its
batch stops the run with one line, a wait says what it waits for, a generator that keeps failing stops the run
with its last error line, a missing engine or a wrong task or reward is one line at start, moved keys name
their replacement, the step line has its elapsed time and ETA. The runs themselves: test_first_hour.py."""

from __future__ import annotations

import io
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from trainer import cli, preconditions
from trainer.config import ConfigError, compose
from trainer.launch.local import after_death
from trainer.launch.process import EXIT_REFUSED, EXIT_STOPPED
from trainer.observe.console import Console
from trainer.rl.controller import WAIT_NOTICE_S
from trainer.rl.launch import RLSide, generator_verdict, last_line
from trainer.rl.report import StepReport, duration, eta, step_line
from trainer.rl.settings import MOVED, RL

from contract import names
from tests.rl.test_controller import SETTINGS, Clock, answer, controller, started
from tests.trainer.conftest import CONFIG

GRPO = CONFIG.parent / "grpo.yaml"
ALIKE = RL(group_size=2, prompts_per_step=2, lease_prompts=2, buffer_batches=2, held_out=4, max_rollouts=3)


def scored_alike(c: Any, generator: str = "g") -> None:
    lease = c.lease(generator, 0)
    assert "lease" in lease, lease
    c.result(generator, answer(c, lease, 0, correct=False))  # both completions wrong: equal rewards, dropped


def test_a_step_that_cannot_form_its_batch_stops_the_run_after_max_rollouts() -> None:
    c = controller(ALIKE)
    started(c)
    for _ in range(2):  # 2 of 3 rollouts' worth of prompts (2 each): it may still form
        scored_alike(c)
        assert c.batch(0) is None
        assert not c.done
    scored_alike(c)
    stop = c.batch(0)
    assert stop is not None
    assert stop == {"stop": c.stopped}
    assert c.stopped.startswith(
        "no batch for step 1: 6 prompts scored since the last batch (rl.max_rollouts=3 x rl.prompts_per_step=2) and "
        "6 of them scored alike, 0 of 2 groups with differing rewards ready"
    )
    assert c.done  # generators are told "done", trainer groups "stop"
    assert c.lease("g", 0) == {"done": True}
    assert c.batch(0) == {"stop": c.stopped}


def test_a_formed_batch_starts_the_count_again() -> None:
    c = controller(ALIKE)
    started(c)
    scored_alike(c)
    scored_alike(c)
    lease = c.lease("g", 0)
    c.result("g", answer(c, lease, 0))  # mixed rewards: kept
    assert c.batch(0) is not None
    assert (c.scored, c.alike) == (0, 0)
    c.committed(0, 1, {})
    c.serving.clear()
    scored_alike(c)
    assert c.batch(1) is None
    assert not c.stopped


def test_a_wait_for_a_batch_is_said_once_with_what_it_waits_for() -> None:
    clock = Clock()
    c = controller(SETTINGS, clock=clock)
    started(c)
    assert c.batch(0) is None  # the first ask: the wait starts
    clock.now = WAIT_NOTICE_S - 1
    assert c.waiting() is None
    c.lease("g", 0)  # two prompts out with one generator
    clock.now = WAIT_NOTICE_S + 1
    assert c.waiting() == (
        "rl step 1: waiting 11 s for its batch: 0 of 2 groups with differing rewards ready, 2 prompts out with "
        "1 generator(s) (holding version 0; the trainer groups serve version 0); 0 scored since the last batch, "
        "0 alike (the run stops at 40, rl.max_rollouts)"
    )
    assert c.waiting() is None  # once per step


@pytest.mark.parametrize(
    ("code", "failures", "verdict"),
    [(1, 1, "restart"), (-9, 3, "restart"), (1, 4, "failed"), (0, 4, "failed"), (EXIT_REFUSED, 1, "refused")],
)
def test_a_generator_restarts_until_it_failed_max_restarts_times_in_a_row(
    code: int, failures: int, verdict: str
) -> None:
    assert generator_verdict(code, failures, 3) == verdict


def test_a_replica_group_restarts_at_most_ft_max_restarts_times(tmp_path: Path) -> None:
    assert compose(CONFIG, ["run.name=x"]).ft.max_restarts == 3
    assert after_death(True, 4, 1, limit=5) == "restart"
    assert after_death(True, 5, 1, limit=5) == "fail"
    assert after_death(True, 0, 1, limit=0) == "fail"
    stream = io.StringIO()
    Console(tmp_path, 10, stream).restarted(1, "exited with -9", 2.0, 4, limit=5)
    assert stream.getvalue() == "replica group 1: exited with -9; restarting it in 2 s (restart 4 of 5)\n"


@dataclass
class Failing:
    """A Runner whose generators exit at once with ``code``, having written ``error``."""

    code: int
    error: str = "RuntimeError: CUDA error: no kernel image is available"
    spawned: list[tuple[int, int]] = field(default_factory=list)
    stopped: bool = False

    def spawn(self, index: int, incarnation: int) -> int | None:
        self.spawned.append((index, incarnation))
        return None

    def exited(self, index: int) -> int | None:
        return self.code

    def stop(self, deadline_s: float) -> None:
        self.stopped = True

    def last_error(self, index: int) -> str:
        return self.error


def side(tmp_path: Path, *extra: str) -> RLSide:
    cfg = compose(GRPO, ["run.name=x", "rl.generators=1", "ft.restart_delay_s=0.001", *extra])
    return RLSide(cfg, tmp_path)


def test_a_generator_that_keeps_failing_stops_the_run_with_its_last_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rl = side(tmp_path, "rl.max_restarts=2")
    runner = Failing(code=1)
    try:
        rl.start(runner)
        for _ in range(6):
            time.sleep(0.002)  # past the restart delay
            rl.poll()
    finally:
        rl.finish({})
    assert runner.spawned == [(0, 0), (0, 1), (0, 2)]  # the first start and 2 restarts
    why = (
        "generator-0.2 exited 3 time(s) in a row without an answer kept (exit 1; rl.max_restarts=2): "
        "RuntimeError: CUDA error: no kernel image is available"
    )
    assert rl.controller.stopped == why
    assert rl.outcome(0, "completed") == (1, f"failed: {why}")
    assert rl.outcome(3, "stopped: non-finite") == (3, "stopped: non-finite")  # a group's final code comes first
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("rl: controller at http://")  # what it started, at once
    assert out[1:] == [
        "rl: generator-0.0 exited with 1; restarting it in 0.001 s (1 of 2 in a row without an answer kept)",
        "rl: generator-0.1 exited with 1; restarting it in 0.001 s (2 of 2 in a row without an answer kept)",
    ]


def test_a_generator_that_refuses_to_start_stops_the_run_at_once_with_exit_2(tmp_path: Path) -> None:
    rl = side(tmp_path)
    runner = Failing(code=EXIT_REFUSED, error="generator-0.0: rl.engine: vllm is not installed for python")
    try:
        rl.start(runner)
        rl.poll()
        rl.poll()
    finally:
        rl.finish({})
    assert runner.spawned == [(0, 0)]  # never restarted
    assert rl.outcome(0, "completed") == (
        EXIT_REFUSED,
        "stopped: generator-0.0 refused to start (exit 2): generator-0.0: rl.engine: vllm is not installed for python",
    )


@dataclass
class Running(Failing):
    """A Runner whose generators keep running."""

    def exited(self, index: int) -> int | None:
        return None


def test_a_wait_for_a_batch_is_on_the_console_and_in_the_runs_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """CI, stop 50: a run that waited for good left nothing in rl.jsonl that said so."""
    rl = side(tmp_path)
    clock = Clock()
    rl.controller.clock = clock
    try:
        rl.start(Running(code=0))
        rl.controller.start(0, "t0", 0, None)
        assert rl.controller.batch(0) is None
        clock.now = WAIT_NOTICE_S + 1
        rl.poll()
        rl.poll()  # said once
    finally:
        rl.finish({})
    said = [line for line in capsys.readouterr().out.splitlines() if "for its batch" in line]
    recorded = [json.loads(line) for line in (tmp_path / "rl.jsonl").read_text().splitlines()]
    assert [r["line"] for r in recorded if r["event"] == "waiting"] == said
    assert len(said) == 1
    assert said[0].startswith("rl step 1: waiting 11 s for its batch: 0 of 32 groups")


def test_a_stalled_run_exits_with_its_own_code(tmp_path: Path) -> None:
    rl = side(tmp_path)
    try:
        rl.controller.stop("no batch for step 1: ...")
        assert rl.outcome(0, "completed") == (EXIT_STOPPED, "stopped: no batch for step 1: ...")
    finally:
        rl.finish({})


def test_the_last_line_of_a_generators_log_is_its_error(tmp_path: Path) -> None:
    log = tmp_path / "generator-0.log"
    assert last_line(log) == ""
    log.write_text("Traceback (most recent call last):\n  File x\nModuleNotFoundError: No module named 'vllm'\n\n")
    assert last_line(log) == "ModuleNotFoundError: No module named 'vllm'"


def rl_cfg(tmp_path: Path, *extra: str) -> Any:
    return compose(GRPO, ["run.name=x", f"checkpoint.dir={tmp_path / 'ck'}", *extra])


def test_a_missing_engine_is_one_line_at_start_for_the_local_launcher_only(tmp_path: Path) -> None:
    vllm = rl_cfg(tmp_path, f"rl.engine={names.VLLM_ENGINE}")
    problem = preconditions.engine_installed(vllm, lambda module: False)
    assert problem is not None
    assert problem.startswith("rl.engine: vllm is not installed for ")
    assert problem.endswith("; run the generators from the generator image (platform/trainer/Dockerfile.generator) "
                            "or set rl.engine=torch")  # fmt: skip
    assert preconditions.engine_installed(vllm, lambda module: True) is None
    assert preconditions.engine_installed(rl_cfg(tmp_path), lambda module: False) is None  # the torch engine
    ray = rl_cfg(tmp_path, f"rl.engine={names.VLLM_ENGINE}", "run.launcher=ray")
    assert preconditions.engine_installed_here(ray) is None  # the generator pods' image has it, not the driver's


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("rl.reward=no_such_module:score", "rl.reward: cannot import no_such_module (ModuleNotFoundError: "),
        ("rl.reward=json:no_such_function", "rl.reward: json has no function no_such_function; define "),
        ("rl.reward=nonsense", "rl.reward: 'nonsense' is neither "),
        ("rl.task=/no/such/task.jsonl", "rl.task: /no/such/task.jsonl: cannot read it (FileNotFoundError"),
        ("rl.held_out=220", "rl.held_out: held_out 220 must leave training problems out of 220; lower rl.held_out"),
    ],
)
def test_a_wrong_reward_or_task_is_one_line_at_start(tmp_path: Path, override: str, expected: str) -> None:
    problem = preconditions.task_loads(rl_cfg(tmp_path, override))
    assert problem is not None
    assert problem.startswith(expected), problem
    assert "\n" not in problem


def test_a_task_file_that_is_not_json_is_one_line_naming_its_line(tmp_path: Path) -> None:
    task = tmp_path / "task.jsonl"
    task.write_text('{"prompt": "1+1=", "answer": "2"}\nnot json\n')
    problem = preconditions.task_loads(rl_cfg(tmp_path, f"rl.task={task}"))
    assert problem is not None
    assert problem.startswith(f"rl.task: {task}:2: not JSON"), problem


def test_the_driver_refuses_a_wrong_reward_writing_nothing_and_leaving_no_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The forkserver starts before the checks (its imports overlap theirs): a refused run stops it again."""
    from multiprocessing import forkserver

    args = [str(GRPO), "run.name=x", f"checkpoint.dir={tmp_path / 'ck'}", f"run.report_dir={tmp_path / 'runs'}"]
    assert cli.main([*args, "rl.reward=no_such_module:score"]) == EXIT_REFUSED
    err = capsys.readouterr().err
    assert err.startswith("train.py: rl.reward: cannot import no_such_module")
    assert err.count("\n") == 1
    assert not (tmp_path / "runs").exists()
    assert not (tmp_path / "ck").exists()
    assert getattr(forkserver, "_forkserver")._forkserver_pid is None  # noqa: B009  # CPython's own record of it


@pytest.mark.parametrize("key", sorted(MOVED))
def test_a_key_the_rl_run_takes_from_elsewhere_is_refused_naming_it(key: str) -> None:
    with pytest.raises(ConfigError) as error:
        compose(GRPO, ["run.name=x", f"{key}=0.1"])
    assert error.value.lines[0].startswith(f"{key}: not a key; ")
    assert len(error.value.lines) == 1


def test_rl_lr_names_optim_lr() -> None:
    with pytest.raises(ConfigError) as error:
        compose(GRPO, ["run.name=x", "+rl.lr=0.01"])
    assert error.value.lines == ("rl.lr: not a key; the RL step's learning rate is optim.lr: set optim.lr=0.01",)


def test_help_says_which_keys_an_rl_run_reads() -> None:
    text = " ".join(cli.usage().split())
    assert "run.mode=rl (trainer/rl/README.md) reads run.steps (policy updates), optim.lr," in text
    assert "rl.seed orders the training prompts only" in text
    assert "There is no rl.lr, rl.steps" in text
    listed = {line.split()[0] for line in cli.usage().splitlines() if line.startswith("  rl.")}
    assert {"rl.max_rollouts", "rl.max_restarts", "rl.seed"} <= listed
    assert not listed & set(MOVED)


def test_the_step_line_ends_with_elapsed_time_and_eta() -> None:
    report = StepReport(
        step=12, steps=60, reward=0.5, version=11, ages=(1, 0), generated_tokens=100, trained_tokens=100,
        generate_seconds=1.0, train_seconds=1.0, sync_seconds=0.0, elapsed_s=75.4, eta_s=3725.0,
    )  # fmt: skip
    assert step_line(report).endswith("  elapsed 1m15s  eta 1h02m")
    assert [duration(s) for s in (0, 9.6, 60, 3599, 3600)] == ["0s", "10s", "1m00s", "59m59s", "1h00m"]
    assert eta(110.0, (100.0, 2), 2, 60) is None  # one step: no pace yet
    assert eta(110.0, (100.0, 2), 4, 60) == pytest.approx(5 * 56)


def test_a_peer_gone_mid_request_is_one_log_line_not_a_traceback(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    rl = side(tmp_path)
    try:
        with caplog.at_level(logging.INFO, logger="trainer.rl"):
            try:
                raise BrokenPipeError(32, "Broken pipe")
            except BrokenPipeError:
                rl.service.server.handle_error(None, ("127.0.0.1", 40000))
    finally:
        rl.finish({})
    assert "Traceback" not in capfd.readouterr().err
    assert [r.getMessage() for r in caplog.records] == ["controller: 127.0.0.1 went away mid-request (BrokenPipeError)"]


def test_ctrl_c_is_one_line_saying_how_to_resume(tmp_path: Path) -> None:
    line = cli.interrupted(rl_cfg(tmp_path))
    assert line == (
        "train.py: run x stopped by Ctrl-C (SIGINT), its processes ended; run the same command again to resume "
        "from the start (no checkpoint yet)"
    )
