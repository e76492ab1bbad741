"""`python train.py CONFIG [overrides...]` (also `meridian-train`): compose the config, then launch."""

from __future__ import annotations

import sys

from trainer.config import ConfigError, compose

USAGE = "usage: train.py CONFIG.yaml [key=value ...] [+new.key=value ...]"
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
    if any(a in ("-h", "--help") for a in args):
        print(usage())
        return 0
    try:
        cfg = compose(args[0], args[1:])
    except ConfigError as error:
        for line in error.lines:
            print(f"train.py: {line}", file=sys.stderr)
        return 2
    from trainer.preconditions import first_problem
    from trainer.resume import start_refusal
    from trainer.worker import EXIT_REFUSED

    refusal = first_problem(cfg) or start_refusal(cfg)
    if refusal is not None:
        print(f"train.py: {refusal}", file=sys.stderr)
        return EXIT_REFUSED
    if cfg.run.launcher == "ray":
        from trainer.ray_train import launch as ray_launch

        return ray_launch(cfg)
    from trainer.local import launch

    return launch(cfg)
