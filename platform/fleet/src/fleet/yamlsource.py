"""Parse YAML and remember where each value was written, so errors can name a line."""

from __future__ import annotations

from dataclasses import dataclass

import yaml

import safeyaml
from contract.problem import Path, Problem


@dataclass(frozen=True)
class Source:
    data: object
    lines: dict[Path, int]  # path -> 1-based line where its value (or key) starts

    def line_of(self, path: Path) -> int:
        """Line of the deepest part of `path` that is written in the file."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(path[:end])
            if line is not None:
                return line
        return 1


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
        node = safeyaml.compose(text, limits)
        data = safeyaml.construct(node)
    except safeyaml.YamlError as exc:
        raise YamlSyntaxError(exc.line, exc.message) from None
    lines: dict[Path, int] = {}
    problems: list[Problem] = []
    if node is not None:
        _walk(node, (), lines, problems)
    return Source(data, lines), problems


def _walk(node: yaml.Node, path: Path, lines: dict[Path, int], problems: list[Problem]) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[object] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            child = (*path, key)
            if key in seen:
                problems.append(Problem(child, "key appears twice in the same mapping; keep one"))
                continue
            seen.add(key)
            lines[child] = key_node.start_mark.line + 1
            _walk(value_node, child, lines, problems)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, (*path, index), lines, problems)
