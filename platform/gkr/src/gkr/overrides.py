"""What a job's command tells the trainer's configuration: its Hydra `key=value` overrides (pure).

gkr cannot read the configuration files inside the image; the command line is what it can see.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence


def hydra_value(command: str | Sequence[str] | None, keys: tuple[str, ...]) -> str | None:
    """The last `key=value` override (also `+key=`, `++key=`) of the command for any of `keys`."""
    if isinstance(command, str):
        try:
            tokens = shlex.split(command)
        except ValueError:  # unbalanced quotes: bash will say so; read the words as they are
            tokens = command.split()
    else:
        tokens = list(command or [])
    found = None
    for token in tokens:
        key, sep, value = token.lstrip("+").partition("=")
        if sep and key in keys:
            found = value
    return found
