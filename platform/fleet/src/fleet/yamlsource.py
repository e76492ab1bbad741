"""Parse YAML and remember where each value was written, so errors can name a line.

The line map lives in platform/safeyaml (gkr reads job files with it, without fleet);
this module turns its duplicate keys into the spec's problems.
"""

from __future__ import annotations

import safeyaml
from contract.problem import Problem
from safeyaml import Source

__all__ = ["Source", "YamlSyntaxError", "parse"]


class YamlSyntaxError(Exception):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


def parse(text: str, limits: safeyaml.Limits = safeyaml.DEFAULT) -> tuple[Source, list[Problem]]:
    """Return the document and its line map, plus duplicate-key problems.

    Raises YamlSyntaxError for text that is not YAML, or YAML beyond `limits`
    (size, depth, aliases: see platform/safeyaml).
    """
    try:
        source = safeyaml.located(text, limits)
    except safeyaml.YamlError as exc:
        raise YamlSyntaxError(exc.line, exc.message) from None
    return source, [Problem(path=path, message=safeyaml.DUPLICATE_KEY) for path in source.duplicates]
