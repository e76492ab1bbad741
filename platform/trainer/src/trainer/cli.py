"""`python train.py CONFIG [overrides...]` (also `meridian-train`): compose the config, then launch; `train.py export`."""

from __future__ import annotations

import sys

from trainer.config import ConfigError, compose

USAGE = (
    "usage: train.py CONFIG.yaml [key=value ...] [+new.key=value ...]\n"
    "       train.py export CONFIG.yaml [key=value ...] --out DIR  (a committed checkpoint for transformers and vLLM)"
)
KEYS = "configuration keys (key=value overrides them; defaults are the schema's, CONFIG.yaml may set others):"


def usage() -> str:
    """The usage line and every configuration key with its default, type and bounds (trainer/keys.py)."""
    from trainer.config import Config
    from trainer.keys import table

    return f"{USAGE}\n\n{KEYS}\n{table(Config)}"


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
    from trainer.checkpoint.resume import start_state
    from trainer.loop.worker import EXIT_REFUSED
    from trainer.observe.runs import committed_target, inner_per_commit
    from trainer.preconditions import first_problem

    refusal, newest = first_problem(cfg) or None, None
    if refusal is None:
        refusal, newest = start_state(cfg)
    if refusal is not None:
        print(f"train.py: {refusal}", file=sys.stderr)
        return EXIT_REFUSED
    if cfg.run.mode == "pretrain" and newest is not None and newest >= committed_target(cfg):
        # Its groups would resume at the end and report nothing ("goodput 0.0%"): say so instead of starting them.
        done = newest * inner_per_commit(cfg)
        print(f"nothing to do: run {cfg.run.name} already completed step {done} of {cfg.run.steps}; "
              "raise run.steps to train on")  # fmt: skip
        return 0
    if cfg.run.launcher == "ray":
        from trainer.launch.ray_train import launch as ray_launch

        return ray_launch(cfg)
    from trainer.launch.local import launch

    return launch(cfg)
