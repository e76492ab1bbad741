"""`python train.py CONFIG [overrides...]` (also `meridian-train`): compose the config, then launch."""

from __future__ import annotations

import sys

from trainer.config import ConfigError, compose

USAGE = "usage: train.py CONFIG.yaml [key=value ...] [+new.key=value ...]"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    try:
        cfg = compose(args[0], args[1:])
    except ConfigError as error:
        print(f"train.py: {error}", file=sys.stderr)
        return 2
    from trainer.worker import EXIT_REFUSED, start_refusal

    refusal = start_refusal(cfg)
    if refusal is not None:
        print(f"train.py: {refusal}", file=sys.stderr)
        return EXIT_REFUSED
    if cfg.run.launcher == "ray":
        from trainer.ray_train import launch as ray_launch

        return ray_launch(cfg)
    from trainer.local import launch

    return launch(cfg)
