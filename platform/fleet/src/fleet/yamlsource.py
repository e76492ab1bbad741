"""Parse YAML and remember where each value was written, so errors can name a line."""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from fleet.problems import Path, Problem

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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


def parse(text: str) -> tuple[Source, list[Problem]]:
    """Return the document and its line map, plus duplicate-key problems.

    Raises YamlSyntaxError for text that is not YAML.
    """
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise YamlSyntaxError(line, f"{exc.problem or exc.context}; check indentation and quoting") from None
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(1, str(exc).splitlines()[0]) from None
    finally:
        loader.dispose()
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
