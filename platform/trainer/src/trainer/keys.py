"""`train.py --help`'s table of configuration keys, derived from the schema's declarations (config.py).

Read through ``contract.codec.declared`` as gkr's job-key table is, so the help cannot drift from what the
decoder accepts: every key with its type, the bounds the decoder enforces, and the schema's default.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, get_args, get_origin

from contract import codec


def rows(cls: type, prefix: str = "") -> list[tuple[str, str, str]]:
    """(dotted key, default, type and bounds) of every leaf key under ``cls``, in declaration order."""
    out: list[tuple[str, str, str]] = []
    for field, kind in codec.declared(cls):
        path = f"{prefix}{field.name}"
        if dataclasses.is_dataclass(kind):
            out += rows(typing.cast(type, kind), f"{path}.")
        elif field.init and get_origin(kind) is not dict:  # `extra` holds the `+key` additions: no key of its own
            out.append((path, _default(field), _kind(kind) + _bounds(codec.setting_of(field))))
    return out


def _default(field: dataclasses.Field[Any]) -> str:
    if not codec.has_default(field):
        return "required"
    value = codec.default_of(field)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return f"[{', '.join(map(str, value))}]"
    return '""' if value == "" else str(value)


def _kind(kind: Any) -> str:
    origin, args = get_origin(kind), get_args(kind)
    if origin is typing.Literal:
        return "one of " + ", ".join(map(str, args))
    if origin is tuple:
        return "list of " + ("numbers" if float in args else "strings")
    return {str: "string", int: "integer", float: "number", bool: "true or false"}.get(kind, str(kind))


def _bounds(rule: codec.Setting) -> str:
    words = (("at least", rule.low), ("above", rule.above), ("at most", rule.high), ("below", rule.below))
    return "".join(f", {word} {_number(value)}" for word, value in words if value is not None)


def _number(value: float) -> str:
    return f"{int(value):_}" if float(value).is_integer() else str(value)


def table(cls: type) -> str:
    found = rows(cls)
    width = max(len(key) for key, _, _ in found)
    span = max(len(default) for _, default, _ in found)
    return "\n".join(f"  {key:<{width}}  {default:<{span}}  {what}" for key, default, what in found)
