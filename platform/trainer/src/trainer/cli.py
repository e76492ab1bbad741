"""`python train.py CONFIG [overrides...]` (also `meridian-train`): compose the config, then launch; `train.py export`."""

from __future__ import annotations

import sys
import textwrap
from typing import TYPE_CHECKING

from trainer.config import Config, ConfigError, compose

if TYPE_CHECKING:
    from trainer.launch.forked import Output

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a process Ctrl-C ended

USAGE = (
    "usage: train.py CONFIG.yaml [key=value ...] [+new.key=value ...]\n"
    "       train.py export CONFIG.yaml [key=value ...] --out DIR  (a committed checkpoint for transformers and vLLM)"
)
KEYS = "configuration keys (key=value overrides them; defaults are the schema's, CONFIG.yaml may set others):"


def usage() -> str:
    """The usage line and every configuration key with its default, type and bounds (trainer/keys.py)."""
    from trainer.keys import table
    from trainer.rl.settings import HELP

    return f"{USAGE}\n\n{KEYS}\n{table(Config)}\n\n{textwrap.fill(HELP, 110)}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    # The image's default command is `train.py configs/config.yaml --help`: --help anywhere wins
    # (Hydra would read it as a malformed override).
    if not args:
        print(USAGE, file=sys.stderr)
        return 2
    if args[0] == "export":  # a committed checkpoint as a Hugging Face folder (export.py)
        from trainer.export import main as export

        return export(args[1:])
    if any(a in ("-h", "--help") for a in args):
        print(usage())
        return 0
    try:
        cfg = compose(args[0], args[1:])
    except ConfigError as error:
        for line in error.lines:
            print(f"train.py: {line}", file=sys.stderr)
        return 2
    from trainer.launch import forked

    output = None if cfg.run.launcher == "ray" else forked.prestart()  # its imports overlap the checks below
    try:
        code = refused(cfg)
        return code if code is not None else launched(cfg, output)
    finally:
        if output is not None:  # a refused run's forkserver; after a launch, stopped already (then a no-op)
            forked.stop()


def refused(cfg: Config) -> int | None:
    """The exit code of a run that must not start (its one line printed), or None to launch it."""
    from trainer.checkpoint.resume import start_state
    from trainer.launch.process import EXIT_REFUSED
    from trainer.observe.runs import committed_target, inner_per_commit
    from trainer.preconditions import first_problem

    refusal, newest = first_problem(cfg) or None, None
    if refusal is None:
        refusal, newest = start_state(cfg)
    if refusal is not None:
        print(f"train.py: {refusal}", file=sys.stderr)
        return EXIT_REFUSED
    if newest is not None and newest >= committed_target(cfg):
        # Its groups would resume at the end and report nothing ("goodput 0.0%"): say so instead of starting them.
        done = newest * inner_per_commit(cfg)
        print(f"nothing to do: run {cfg.run.name} already completed step {done} of {cfg.run.steps}; "
              "raise run.steps to train on")  # fmt: skip
        return 0
    return None


def launched(cfg: Config, output: Output | None) -> int:
    """The launch's exit code; ``output``: the forkserver's, kept in the run's folder from now on."""
    from trainer.launch.interrupt import recorded

    try:
        with recorded():  # a Ctrl-C CPython drops inside a finalizer still reaches the launcher's loop
            if cfg.run.launcher == "ray":
                from trainer.launch.ray_train import launch as ray_launch

                return ray_launch(cfg)
            from trainer.launch.local import launch
            from trainer.observe.runs import run_dir

            assert output is not None
            output.keep(run_dir(cfg) / "forkserver.log")
            return launch(cfg)
    except KeyboardInterrupt:  # the launcher ended what it started; one line instead of the traceback
        print(interrupted(cfg), file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED


def interrupted(cfg: Config) -> str:
    """What Ctrl-C did, and how to go on from where the run's checkpoints are."""
    from trainer.checkpoint.resume import start_state

    try:
        _, newest = start_state(cfg)
    except Exception:  # a checkpoint half written when the run was stopped: the next start sorts it out
        newest = None
    where = f"its newest checkpoint (step {newest})" if newest is not None else "the start (no checkpoint yet)"
    return (
        f"train.py: run {cfg.run.name} stopped by Ctrl-C (SIGINT), its processes ended; run the same command "
        f"again to resume from {where}"
    )
