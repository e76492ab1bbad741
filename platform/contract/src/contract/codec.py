"""Frozen dataclasses to and from JSON, strictly: every field typed, nothing unknown, a schema version.

A document is `{"schema": "<name>/v<N>", ...fields}`. Reading checks the
schema string, refuses unknown and missing fields, and checks every value's
type against the dataclass annotations, so a hand-edited or stale file fails
with the path of the first bad value instead of deep inside a consumer.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

from contract.problem import Invalid

T = TypeVar("T")
SCHEMA_KEY = "schema"
MAX_CHARS = 8 << 20  # a registry is ~10 KB; anything near this is not one


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


def loads(cls: type[T], text: str, schema: str, where: str, fix: str = "regenerate it with `make generate`") -> T:
    """`cls` from a document; Invalid (one line: where, what, how to fix) when it is not one."""
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


def from_data(cls: type[T], data: Any, where: str, fix: str = "regenerate it with `make generate`") -> T:
    try:
        return typing.cast(T, _value(cls, data, ""))
    except _Bad as bad:
        raise Invalid([f"{where}: {bad.path or '(document)'}: {bad.message}; {fix}"]) from None


class _Bad(Exception):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path, self.message = path, message


def _value(kind: Any, data: Any, path: str) -> Any:
    origin = get_origin(kind)
    if kind is Any:
        return data
    if origin is typing.Union or origin is types.UnionType:
        options = get_args(kind)
        if data is None and type(None) in options:
            return None
        for option in (o for o in options if o is not type(None)):
            try:
                return _value(option, data, path)
            except _Bad:
                continue
        raise _Bad(path, f"{data!r} is not {' or '.join(_name(o) for o in options)}")
    if origin is typing.Literal:
        if data not in get_args(kind):
            raise _Bad(path, f"{data!r} is not one of {', '.join(map(repr, get_args(kind)))}")
        return data
    if origin is tuple:
        item = get_args(kind)[0]
        if not isinstance(data, list):
            raise _Bad(path, f"expected a list, got {type(data).__name__}")
        return tuple(_value(item, v, f"{path}[{i}]") for i, v in enumerate(data))
    if origin is dict:
        key_type, value_type = get_args(kind)
        if not isinstance(data, dict):
            raise _Bad(path, f"expected an object, got {type(data).__name__}")
        return {_key(key_type, k, path): _value(value_type, v, f"{path}.{k}" if path else k) for k, v in data.items()}
    if dataclasses.is_dataclass(kind):
        return _dataclass(kind, data, path)
    return _scalar(kind, data, path)


def _dataclass(cls: Any, data: Any, path: str) -> Any:
    if not isinstance(data, dict):
        raise _Bad(path, f"expected an object, got {type(data).__name__}")
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise _Bad(f"{path}.{unknown[0]}" if path else unknown[0], "unknown field")
    values = {}
    for name, field in fields.items():
        sub = f"{path}.{name}" if path else name
        if name in data:
            values[name] = _value(hints[name], data[name], sub)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise _Bad(sub, "missing")
    return cls(**values)


def _key(kind: Any, key: str, path: str) -> Any:
    if kind is int:
        digits = key.removeprefix("-")
        # ASCII digits only: int() also takes "1_3", " 13" and other scripts' digits, so two keys could be one.
        if not (digits.isascii() and digits.isdigit() and len(digits) <= 18 and str(int(key)) == key):
            raise _Bad(path, f"key {key[:40]!r} is not an integer")
        return int(key)
    if get_origin(kind) is typing.Literal and key not in get_args(kind):
        raise _Bad(path, f"key {key[:40]!r} is not one of {', '.join(map(repr, get_args(kind)))}")
    return key


def _scalar(kind: Any, data: Any, path: str) -> Any:
    if kind is float and isinstance(data, int | float) and not isinstance(data, bool):
        return float(data)
    if kind in (str, int, bool) and type(data) is kind:
        return data
    raise _Bad(path, f"{data!r} is not {_name(kind)}")


def _name(kind: Any) -> str:
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false", type(None): "null"}.get(
        kind, getattr(kind, "__name__", str(kind))
    )
