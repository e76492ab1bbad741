"""Typed data from untrusted documents: the one decoder every component uses.

A frozen dataclass is the schema. `decode` walks its fields against plain data
(parsed JSON or YAML), refuses unknown and missing keys, checks every value's
type and the bounds a field declares with `setting`, and collects every problem
with its path (`regions[0].nodes: '2' is not an integer; <how to fix>`), so a
hand-edited or hostile document fails with all its mistakes at once and never
deep inside a consumer. The contract documents (`loads`), the trainer's
configuration and gkr's job files all go through it.

A document is `{"schema": "<name>/v<N>", ...fields}`: `loads` checks the schema
string first.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import math
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

from contract.problem import Invalid, Path, Problem, dotted, one_of

T = TypeVar("T")
SCHEMA_KEY = "schema"
MAX_CHARS = 8 << 20  # a registry is ~10 KB; anything near this is not one
METADATA_KEY = "meridian.setting"
REGENERATE = "regenerate it with `make generate`"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Setting:
    """What a field declares beyond its type: help, the command-line flag, and inclusive/exclusive bounds."""

    help: str = ""
    flag: str | None = None  # e.g. "--pods"; None: the field has no flag of its own
    low: float | None = None  # value >= low
    above: float | None = None  # value > above
    high: float | None = None  # value <= high
    below: float | None = None  # value < below

    def violation(self, value: float) -> str | None:
        if self.low is not None and value < self.low:
            return f"must be at least {_number(self.low)} (got {value!r})"
        if self.above is not None and value <= self.above:
            return f"must be greater than {_number(self.above)} (got {value!r})"
        if self.high is not None and value > self.high:
            return f"must be at most {_number(self.high)} (got {value!r})"
        if self.below is not None and value >= self.below:
            return f"must be less than {_number(self.below)} (got {value!r})"
        return None


NO_SETTING = Setting()


def setting(
    default: Any = dataclasses.MISSING,
    *,
    factory: Callable[[], Any] | Any = dataclasses.MISSING,
    help: str = "",
    flag: str | None = None,
    low: float | None = None,
    above: float | None = None,
    high: float | None = None,
    below: float | None = None,
) -> Any:
    """A dataclass field that declares its help, flag and bounds once, for the decoder and every derived table."""
    meta = {METADATA_KEY: Setting(help=help, flag=flag, low=low, above=above, high=high, below=below)}
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def setting_of(field: dataclasses.Field[Any]) -> Setting:
    found = field.metadata.get(METADATA_KEY, NO_SETTING)
    assert isinstance(found, Setting)
    return found


def declared(cls: type) -> list[tuple[dataclasses.Field[Any], Any]]:
    """(field, resolved type) of each field of `cls`, in order: what tables derived from the declarations read."""
    hints = _hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls)]


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """A class's resolved field types, once per class: resolving the annotations (strings) is most of a decode."""
    return get_type_hints(cls)


def has_default(field: dataclasses.Field[Any]) -> bool:
    return field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING


def default_of(field: dataclasses.Field[Any]) -> Any:
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None if field.default is dataclasses.MISSING else field.default


Fix = str | Callable[[str, str], str]  # how to fix a bad value: text, or (dotted path, expected kind) -> text


def decode(
    cls: type[T], data: Any, *, fix: Fix = REGENERATE, path: Path = (), null_is_default: bool = False
) -> tuple[T | None, list[Problem]]:
    """`cls` from plain data, or None and every problem found (each `Problem(path, "what; how to fix")`).

    null_is_default: a null value stands for the field's default (YAML's `key:` with nothing after it).
    """
    walker = _Walker(fix, null_is_default)
    value = walker.value(cls, data, path, NO_SETTING)
    return (None if walker.problems else typing.cast(T, value)), walker.problems


def from_data(cls: type[T], data: Any, where: str, fix: Fix = REGENERATE) -> T:
    """`cls` from plain data; Invalid (one line per problem: where, path, what, how to fix) when it is not one."""
    value, problems = decode(cls, data, fix=fix)
    if problems:
        raise Invalid([p.line(where) for p in problems])
    assert value is not None
    return value


def to_data(value: Any) -> Any:
    """Plain JSON data: dataclasses to objects, tuples to lists, dict keys as strings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [to_data(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_data(v) for k, v in value.items()}
    return value


def dumps(value: Any, schema: str, indent: int | None = 1) -> str:
    """The document for `value`, keys sorted so a regenerated file only changes where the facts did."""
    text = json.dumps({SCHEMA_KEY: schema, **to_data(value)}, indent=indent, sort_keys=True)
    return text + "\n" if indent is not None else text


def loads(cls: type[T], text: str, schema: str, where: str, fix: str = REGENERATE) -> T:
    """`cls` from a document; Invalid (one line per problem: where, what, how to fix) when it is not one."""
    if len(text) > MAX_CHARS:
        raise Invalid([f"{where}: {len(text)} characters, more than {MAX_CHARS}; {fix}"])
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the parser goes
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
        raise Invalid([f"{where}: not JSON ({why}); {fix}"]) from None
    if not isinstance(data, dict):
        raise Invalid([f"{where}: expected a JSON object; {fix}"])
    found = data.pop(SCHEMA_KEY, None)
    if found != schema:
        raise Invalid([f"{where}: schema {found!r}, this tool reads {schema!r}; regenerate it or upgrade the tool"])
    return from_data(cls, data, where, fix)


class _Failed:
    """A value that did not decode (its problems are recorded); never reaches a caller."""


FAILED = _Failed()


class _Walker:
    def __init__(self, fix: Fix, null_is_default: bool) -> None:
        self.fix, self.null_is_default = fix, null_is_default
        self.problems: list[Problem] = []

    def bad(self, path: Path, what: str, kind: Any = None, fix: str | None = None) -> _Failed:
        if fix is None:
            fix = self.fix if isinstance(self.fix, str) else self.fix(dotted(path), _name(kind))
        self.problems.append(Problem(path=path, message=f"{what}; {fix}"))
        return FAILED

    def value(self, kind: Any, data: Any, path: Path, rule: Setting) -> Any:
        origin = get_origin(kind)
        if kind is Any:
            return data
        if origin is typing.Union or origin is types.UnionType:
            return self.union(kind, data, path, rule)
        if origin is typing.Literal:
            if data not in get_args(kind):
                return self.bad(path, f"{_shown(data)} is not one of {', '.join(map(repr, get_args(kind)))}", kind)
            return data
        if origin is tuple:
            return self.sequence(kind, data, path, rule)
        if origin is dict:
            return self.mapping(kind, data, path, rule)
        if dataclasses.is_dataclass(kind):
            return self.dataclass(kind, data, path)
        return self.scalar(kind, data, path, rule)

    def union(self, kind: Any, data: Any, path: Path, rule: Setting) -> Any:
        options = get_args(kind)
        if data is None and type(None) in options:
            return None
        for option in (o for o in options if o is not type(None)):
            trial = _Walker(self.fix, self.null_is_default)
            value = trial.value(option, data, path, rule)
            if not trial.problems:
                return value
            if len(options) == 2 and type(None) in options:  # `X | None`: X's own problem says more
                self.problems.extend(trial.problems)
                return FAILED
        return self.bad(path, f"{_shown(data)} is not {' or '.join(_name(o) for o in options)}", kind)

    def sequence(self, kind: Any, data: Any, path: Path, rule: Setting) -> Any:
        args = get_args(kind)
        if not isinstance(data, list | tuple):
            return self.bad(path, f"{_shown(data)} is not a list", kind)
        if len(args) == 2 and args[1] is Ellipsis:
            items = [self.value(args[0], v, (*path, i), rule) for i, v in enumerate(data)]
        elif len(data) != len(args):
            return self.bad(path, f"expected a list of {len(args)} values, got {len(data)}", kind)
        else:
            items = [self.value(t, v, (*path, i), rule) for i, (t, v) in enumerate(zip(args, data, strict=True))]
        return FAILED if any(v is FAILED for v in items) else tuple(items)

    def mapping(self, kind: Any, data: Any, path: Path, rule: Setting) -> Any:
        key_type, value_type = get_args(kind)
        if not isinstance(data, dict):
            return self.bad(path, f"{_shown(data)} is not an object", kind)
        out = {}
        for key, item in data.items():
            where = (*path, str(key))
            decoded_key = self.key(key_type, key, where)
            decoded = self.value(value_type, item, where, rule)
            if decoded_key is not FAILED and decoded is not FAILED:
                out[decoded_key] = decoded
        return out if len(out) == len(data) else FAILED

    def key(self, kind: Any, key: Any, path: Path) -> Any:
        if not isinstance(key, str):
            return self.bad(path, f"key {_shown(key)} is not a string", str)
        if kind is int:
            digits = key.removeprefix("-")
            # ASCII digits only: int() also takes "1_3", " 13" and other scripts' digits, so two keys could be one.
            if not (digits.isascii() and digits.isdigit() and len(digits) <= 18 and str(int(key)) == key):
                return self.bad(path, f"key {_shown(key)} is not an integer", int)
            return int(key)
        if get_origin(kind) is typing.Literal and key not in get_args(kind):
            return self.bad(path, f"key {_shown(key)} is not one of {', '.join(map(repr, get_args(kind)))}", kind)
        return key

    def dataclass(self, cls: Any, data: Any, path: Path) -> Any:
        if not isinstance(data, dict):
            return self.bad(path, f"{_shown(data)} is not an object", cls)
        hints = _hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
        unknown = [key for key in data if key not in fields]
        for key in unknown:
            self.bad((*path, str(key)), "unknown field", fix=one_of(fields, str(key)))
        # A misspelt field is one mistake: its did-you-mean above already names the missing one.
        misspelt = {m for key in unknown for m in difflib.get_close_matches(str(key), fields, n=1)}
        values, failed = {}, bool(unknown)
        for name, field in fields.items():
            where = (*path, name)
            item = data.get(name)
            if name not in data or (item is None and self.null_is_default and has_default(field)):
                if not has_default(field):
                    if name not in misspelt:
                        self.bad(where, "missing", hints[name])
                    failed = True
                continue
            values[name] = self.value(hints[name], item, where, setting_of(field))
            failed = failed or values[name] is FAILED
        return FAILED if failed else cls(**values)

    def scalar(self, kind: Any, data: Any, path: Path, rule: Setting) -> Any:
        if kind is float and isinstance(data, int | float) and not isinstance(data, bool):
            if not math.isfinite(data):
                return self.bad(path, f"{data!r} is not a finite number", kind)
            data = float(data)
        elif kind not in (str, int, bool, float) or type(data) is not kind:
            return self.bad(path, f"{_shown(data)} is not {_name(kind)}", kind)
        if kind in (int, float):
            wrong = rule.violation(data)
            if wrong:
                return self.bad(path, wrong, kind)
        return data


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _name(kind: Any) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false", type(None): "null"}
    if kind in names:
        return names[kind]
    origin = get_origin(kind)
    if origin is tuple or origin is list:
        return "a list"
    if origin is dict or dataclasses.is_dataclass(kind):
        return "an object"
    if origin is typing.Literal:
        return "one of " + ", ".join(map(repr, get_args(kind)))
    return getattr(kind, "__name__", str(kind))
