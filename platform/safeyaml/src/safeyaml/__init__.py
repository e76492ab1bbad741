"""The one YAML loader for hostile input: the fleet spec, gkr job files, Warden's policy.

Self-contained (PyYAML and the standard library only) so that gkr and Warden can
use it without the fleet model, and so it can move to a stdlib-plus-PyYAML
contract package as is.

PyYAML's safe loader still lets a ten-line file expand into billions of nodes
(aliases to aliases), recurses once per nesting level (libyaml's composer in C,
where a deep enough document overflows the stack) and converts any digits to
an int. So this module composes the node graph itself, from the parser's
events, with an explicit stack, and refuses before any Python object exists:

- a document over `max_bytes`;
- nesting deeper than `max_depth`;
- more than `max_aliases` aliases, an alias to a node that contains it, or
  a document whose expansion (each alias counted as a copy of its target)
  exceeds `max_nodes`;
- a number longer than `MAX_NUMBER_CHARS` (int() of a long string is
  quadratic, and YAML 1.1's base-60 ints `1:2:3...` loop once per part).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.events import (
    AliasEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

# libyaml when present (ten times faster); the events and nodes are the same.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MAX_NUMBER_CHARS = 100  # no int or float we read is longer; see the module doc
_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


@dataclass(frozen=True)
class Limits:
    """What one document may hold. The defaults are far above any spec, job file or policy we write."""

    max_bytes: int = 1024 * 1024  # the shipped fleet.yaml is 6 KB; the API server stores at most 1.5 MiB anyway
    max_depth: int = 64  # fleet.yaml nests 6 deep, a job file 3
    max_aliases: int = 100  # anchors are allowed for shared settings, a few dozen at most
    max_nodes: int = 200_000  # after expansion: ~40 x the shipped fleet, bounds what consumers walk


DEFAULT = Limits()


class YamlError(Exception):
    """The text is not YAML we accept: `line` (1-based) and a message (what, then how to fix it).

    Messages start with "not valid YAML:" for text PyYAML cannot read, and with
    "refused:" for YAML beyond the limits, so a person knows which one to fix.
    """

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


def read_text(path: str | Path, limits: Limits = DEFAULT) -> str:
    """The file as UTF-8 text, reading at most one byte past the limit (never all of /dev/zero).

    Raises OSError for a file that cannot be read, YamlError for one too large or not UTF-8.
    """
    with open(path, "rb") as handle:
        data = handle.read(limits.max_bytes + 1)
    _check_size(len(data), limits)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise YamlError(line, f"not valid YAML: byte {exc.start} is not UTF-8; save the file as UTF-8 text") from None


def compose(text: str, limits: Limits = DEFAULT) -> Node | None:
    """The document's node graph (None for an empty one), checked against `limits`."""
    _check_size(len(text.encode("utf-8", "surrogatepass")), limits)
    loader = _Loader(text)
    try:
        return _Composer(loader, limits).single()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise YamlError(
            mark.line + 1 if mark else 1, f"not valid YAML: {exc.problem or exc.context}; check indentation and quoting"
        ) from None
    except yaml.YAMLError as exc:
        raise YamlError(_line_of(exc), f"not valid YAML: {str(exc).splitlines()[0]}; remove it or quote it") from None
    finally:
        loader.dispose()


def construct(node: Node | None) -> object:
    """Python data (dict, list, str, int, float, bool, None, datetime...) from a composed node."""
    if node is None:
        return None
    loader = _Loader("")
    try:
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise YamlError(
            mark.line + 1 if mark else 1, f"not valid YAML: {exc.problem or exc.context}; quote the value"
        ) from None
    except Exception as exc:
        # PyYAML's constructors raise what their conversions raise on a malformed explicit tag
        # (!!timestamp nope: AttributeError, !!binary: binascii.Error...): all of it is bad input.
        raise YamlError(node.start_mark.line + 1, f"not valid YAML: cannot read a value ({exc}); quote it") from None
    finally:
        loader.dispose()


def load(text: str, limits: Limits = DEFAULT) -> object:
    """compose + construct: the bounded yaml.safe_load."""
    return construct(compose(text, limits))


Location = tuple[str | int, ...]  # a path into a document: mapping keys and list indexes
DUPLICATE_KEY = "key appears twice in the same mapping; keep one"


@dataclass(frozen=True)
class Source:
    """A document and where each value was written, so an error can name its line."""

    data: object
    lines: dict[Location, int]  # path -> 1-based line where its value (or key) starts
    duplicates: tuple[Location, ...] = ()  # keys written twice in one mapping (DUPLICATE_KEY)

    def line_of(self, path: Location) -> int:
        """Line of the deepest part of `path` that is written in the file."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(path[:end])
            if line is not None:
                return line
        return 1


def located(text: str, limits: Limits = DEFAULT) -> Source:
    """`load`, keeping the line of every path and the keys written twice; YamlError as `load`."""
    node = compose(text, limits)
    data = construct(node)
    lines: dict[Location, int] = {}
    duplicates: list[Location] = []
    if node is not None:
        _walk(node, (), lines, duplicates)
    return Source(data, lines, tuple(duplicates))


def _walk(node: Node, path: Location, lines: dict[Location, int], duplicates: list[Location]) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, MappingNode):
        seen: set[object] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            child = (*path, key)
            if key in seen:
                duplicates.append(child)
                continue
            seen.add(key)
            lines[child] = key_node.start_mark.line + 1
            _walk(value_node, child, lines, duplicates)
    elif isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, (*path, index), lines, duplicates)


def _check_size(size: int, limits: Limits) -> None:
    if size > limits.max_bytes:
        raise YamlError(
            1,
            f"refused: the document is larger than {limits.max_bytes:,} bytes, the most accepted; "
            "is this the right file? split it or shorten it",
        )


def _line_of(exc: yaml.YAMLError) -> int:
    # ReaderError (a character YAML forbids) knows its position, not its line.
    mark = getattr(exc, "problem_mark", None)
    return mark.line + 1 if mark is not None else 1


@dataclass
class _Open:
    """A collection being read: its node, expanded size so far, and a mapping key waiting for its value."""

    node: Node
    size: int = 1
    key: Node | None = None


class _Composer:
    """PyYAML's composer (yaml/composer.py) without recursion, with budgets.

    Each finished node knows its expanded size: 1 for a scalar, its target's for
    an alias, 1 + its children's for a collection. Sizes add up as the document
    is read, so a billion-laughs file is refused at the first alias that crosses
    the budget, before the next line is read.
    """

    def __init__(self, loader: Any, limits: Limits) -> None:
        self.events, self.limits = loader, limits
        self.anchors: dict[str, Node] = {}
        self.sizes: dict[int, int] = {}  # id(node) -> expanded size, for finished anchored nodes
        self.open_anchored: set[int] = set()  # anchored collections still being read
        self.aliases = 0

    def single(self) -> Node | None:
        events = self.events
        events.get_event()  # StreamStart
        document = None
        if not events.check_event(StreamEndEvent):
            events.get_event()  # DocumentStart
            document = self.document()
            events.get_event()  # DocumentEnd
        if not events.check_event(StreamEndEvent):
            event = events.get_event()
            raise YamlError(
                event.start_mark.line + 1, "not valid YAML: a second document (after ---); keep one document per file"
            )
        events.get_event()
        return document

    def document(self) -> Node:
        stack: list[_Open] = []  # innermost last
        while True:
            event = self.events.get_event()
            line = event.start_mark.line + 1
            if isinstance(event, SequenceStartEvent | MappingStartEvent):
                stack.append(_Open(self._open(event, line, len(stack))))
                continue
            if isinstance(event, SequenceEndEvent | MappingEndEvent):
                done = stack.pop()
                node, size = done.node, done.size
                node.end_mark = event.end_mark
                if id(node) in self.open_anchored:
                    self.open_anchored.discard(id(node))
                    self.sizes[id(node)] = size
            elif isinstance(event, AliasEvent):
                node, size = self._alias(event, line)
            elif isinstance(event, ScalarEvent):
                node, size = self._scalar(event, line), 1
            else:  # pragma: no cover - the parser emits nothing else inside a document
                raise YamlError(line, f"unexpected {type(event).__name__}; check the document's structure")
            if not stack:
                self._budget(size, line)
                return node
            parent = stack[-1]
            parent.size += size
            self._budget(parent.size, line)
            if isinstance(parent.node, SequenceNode):
                parent.node.value.append(node)
            elif parent.key is None:
                parent.key = node
            else:
                parent.node.value.append((parent.key, node))
                parent.key = None

    def _anchor(self, event: Any, line: int) -> str | None:
        anchor: str | None = event.anchor
        if anchor is not None and anchor in self.anchors:
            raise YamlError(line, f"not valid YAML: anchor &{anchor} is defined twice; rename one")
        return anchor

    def _open(self, event: Any, line: int, depth: int) -> Node:
        if depth >= self.limits.max_depth:
            raise YamlError(
                line, f"refused: nested more than {self.limits.max_depth} levels deep; flatten the structure"
            )
        anchor = self._anchor(event, line)
        kind = SequenceNode if isinstance(event, SequenceStartEvent) else MappingNode
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.events.resolve(kind, None, event.implicit)
        node = kind(tag, [], event.start_mark, None, flow_style=event.flow_style)
        if anchor is not None:
            self.anchors[anchor] = node
            self.open_anchored.add(id(node))  # an alias to it before it ends is recursive
        return node

    def _scalar(self, event: Any, line: int) -> Node:
        anchor = self._anchor(event, line)
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.events.resolve(ScalarNode, event.value, event.implicit)
        if tag in _NUMBER_TAGS and len(event.value) > MAX_NUMBER_CHARS:
            raise YamlError(
                line,
                f"refused: a number of {len(event.value):,} characters; numbers have at most {MAX_NUMBER_CHARS}, "
                "quote it if it is text",
            )
        node = ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style)
        if anchor is not None:
            self.anchors[anchor] = node
            self.sizes[id(node)] = 1
        return node

    def _alias(self, event: Any, line: int) -> tuple[Node, int]:
        target = self.anchors.get(event.anchor)
        if target is None:
            raise YamlError(
                line, f"not valid YAML: alias *{event.anchor} has no anchor &{event.anchor} before it; define it first"
            )
        self.aliases += 1
        if self.aliases > self.limits.max_aliases:
            raise YamlError(
                line,
                f"refused: more than {self.limits.max_aliases} aliases (*name); write the values out "
                "(aliases are limited: a few can expand into billions of values)",
            )
        if id(target) in self.open_anchored:
            raise YamlError(
                line, f"refused: alias *{event.anchor} is inside the node it names (a recursive structure); remove it"
            )
        return target, self.sizes[id(target)]

    def _budget(self, size: int, line: int) -> None:
        # A collection's size so far is a lower bound of the document's: refuse as soon as it is over.
        if size > self.limits.max_nodes:
            raise YamlError(
                line,
                f"refused: the document expands to more than {self.limits.max_nodes:,} values (aliases count once per use); "
                "write fewer values or fewer aliases",
            )
