"""What the job keys' declarations (gkr/spec.py) give beyond decoding: the flag table and the README's table.

The one place that reads the declarations besides `contract.codec.decode`; it never decodes. Every
function takes the declaring class, so a test can derive the same from a class with one more key.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, get_args, get_origin

from contract import codec

README_BEGIN = "<!-- job keys: generated from gkr/spec.py by tests/gkr/test_keys.py; GKR_UPDATE_README=1 rewrites -->"
README_END = "<!-- end of job keys -->"


@dataclass(frozen=True)
class Key:
    path: str  # dotted: `pods`, `ray.head_cpus`, `regions.REGION.replica_groups`
    kind: Any  # the declared type
    field: dataclasses.Field[Any]

    @property
    def setting(self) -> codec.Setting:
        return codec.setting_of(self.field)


def top(cls: type) -> list[Key]:
    """The top-level keys of a declaring class, in declaration order."""
    return [Key(f.name, kind, f) for f, kind in codec.declared(cls)]


def every(cls: type, prefix: str = "") -> list[Key]:
    """Every key, nested ones after their parent (`ray.head_cpus`; a mapping's values as `regions.REGION.x`)."""
    out = []
    for key in top(cls):
        path = f"{prefix}{key.path}"
        out.append(Key(path, key.kind, key.field))
        inner = nested(key.kind)
        if inner is not None:
            below = f"{path}.{placeholder(key)}." if get_origin(key.kind) is dict else f"{path}."
            out += every(inner, below)
    return out


def nested(kind: Any) -> type | None:
    """The declaring class inside a key's type (`Topology | None`; a mapping's values, `dict[str, RegionShare]`)."""
    options = [a for a in get_args(kind) if a is not type(None)] if _is_union(kind) else [kind]
    if len(options) == 1 and dataclasses.is_dataclass(options[0]):
        return typing.cast(type, options[0])
    if get_origin(kind) is dict and dataclasses.is_dataclass(get_args(kind)[1]):
        return typing.cast(type, get_args(kind)[1])
    return None


def placeholder(key: Key) -> str:
    """What a mapping's own keys stand for, from its plural name: `regions` -> `REGION`."""
    return key.path.rsplit(".", 1)[-1].removesuffix("s").upper()


def flags(cls: type) -> dict[str, str]:
    """Top-level key -> its flag (`pods` -> `--pods`), for the keys that have one."""
    return {k.path: k.setting.flag for k in top(cls) if k.setting.flag}


def type_text(kind: Any) -> str:
    """A key's type as a reader of the README says it."""
    if _is_union(kind):
        return " or ".join(type_text(a) for a in get_args(kind) if a is not type(None))
    origin, args = get_origin(kind), get_args(kind)
    if origin is typing.Literal:
        return ", ".join(f"`{a}`" for a in args)
    if origin is tuple:
        return f"list of {type_text(args[0])}s"
    if origin is dict:
        return "mapping" if dataclasses.is_dataclass(args[1]) else f"mapping of {type_text(args[1])}s"
    if dataclasses.is_dataclass(kind):
        return "mapping"
    return {str: "string", int: "integer", bool: "true or false"}.get(kind, getattr(kind, "__name__", str(kind)))


def default_text(field: dataclasses.Field[Any]) -> str:
    if not codec.has_default(field):
        return "required"
    value = codec.default_of(field)
    if value is None or dataclasses.is_dataclass(value):
        return ""  # unset: resolved as the help says, or the keys below it
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple | dict):
        return "`[]`" if isinstance(value, tuple) else "`{}`"
    return f"`{value}`"


def bounds_text(setting: codec.Setting) -> str:
    """`, at least 1`: the bounds the decoder enforces, as the README states them."""
    parts = [
        f"{word} {int(value):,}" if float(value).is_integer() else f"{word} {value:g}"  # 2,147,483,647, not 2.14748e+09
        for word, value in (("at least", setting.low), ("above", setting.above), ("at most", setting.high))
        if value is not None
    ]
    return "".join(f", {p}" for p in parts)


def table(cls: type) -> str:
    """The README's table of job keys: key, type (with bounds), default, flag, what it is."""
    rows = ["| key | type | default | flag | what |", "|---|---|---|---|---|"]
    for key in every(cls):
        flag = key.setting.flag or ""
        cells = [
            f"`{key.path}`",
            type_text(key.kind) + bounds_text(key.setting),
            default_text(key.field),
            f"`{flag}`" if flag.startswith("-") else flag,  # `command`'s is a phrase: the arguments after --
            key.setting.help,
        ]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


def _is_union(kind: Any) -> bool:
    return get_origin(kind) in (typing.Union, types.UnionType)
