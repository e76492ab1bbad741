"""Bad input, the one way every component reports it, and the exit codes they share.

A problem is one line: where (a file, a path into it), what is wrong, how to
fix it. A command that finds any prints each on stderr as `error: <line>` and
exits with USAGE, having changed nothing.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

Path = tuple[str | int, ...]


class Exit(IntEnum):
    OK = 0
    FAILED = 1  # the input was fine; the cluster, a check or the job said no
    USAGE = 2  # bad input: one line per problem, nothing applied
    DESTRUCTIVE = 3  # the plan review found a change that destroys something
    NEEDS_OWNER = 4  # the plan review found a change a code owner must approve (access, versions, the review itself)


@dataclass(frozen=True, kw_only=True)
class Problem:
    """One thing wrong with an input: where (a path into the document) and what to do."""

    path: Path
    message: str

    def line(self, source: str = "") -> str:
        where = dotted(self.path)
        return f"{source}: {where}: {self.message}" if source else f"{where}: {self.message}"


class Invalid(Exception):
    """The input cannot be used; carries every problem found, each already one line."""

    def __init__(self, lines: Sequence[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = tuple(lines)


def one_of(options: Iterable[str], value: str = "") -> str:
    """'use one of a, b, c' with the closest match first when there is one."""
    options = sorted(options)
    close = difflib.get_close_matches(value, options, n=1) if value else []
    hint = f"did you mean {close[0]}? " if close else ""
    return f"{hint}use one of {', '.join(options)}" if options else "none is defined"


def report(exc: Invalid) -> int:
    """Print every problem, one line each, on stderr; the exit code for invalid input."""
    for line in exc.lines:
        print(f"error: {line}", file=sys.stderr)
    return Exit.USAGE


def dotted(path: Path) -> str:
    """`("regions", 0, "zones")` -> `regions[0].zones`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out or "(document)"
