"""Problems found in a fleet spec, and how a person reads them."""

from __future__ import annotations

import sys
from collections.abc import Sequence
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
