"""Problems found in a fleet spec, and how a person reads them."""

from __future__ import annotations

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


def dotted(path: Path) -> str:
    """`("regions", 0, "zones")` -> `regions[0].zones`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out or "(document)"
