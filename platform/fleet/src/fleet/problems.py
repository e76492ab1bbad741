"""Problems found in a fleet spec, and how a person reads them."""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the spec: where (a path into the document) and what to do."""

    path: Path
    message: str


class SpecError(Exception):
    """The spec cannot be used; carries every problem found, already formatted."""

    def __init__(self, lines: Sequence[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = tuple(lines)


def one_of(options: Iterable[str], value: str = "") -> str:
    """'use one of a, b, c' with the closest match first when there is one."""
    options = sorted(options)
    close = difflib.get_close_matches(value, options, n=1) if value else []
    hint = f"did you mean {close[0]}? " if close else ""
    return f"{hint}use one of {', '.join(options)}" if options else "none is defined"


def report(exc: SpecError) -> int:
    """Print every problem, one line each, on stderr; the exit code for invalid input."""
    for line in exc.lines:
        print(f"error: {line}", file=sys.stderr)
    return 2


def dotted(path: Path) -> str:
    """`("regions", 0, "zones")` -> `regions[0].zones`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out or "(document)"
