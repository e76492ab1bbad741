"""The job keys given as flags, as a job file would write them (pure; the options: gkr/commands/job_args.py).

A key's flag is declared with the key (gkr/spec.py). Its value takes the shape of the key's type:
a switch sets the opposite of the key's default, a repeated flag gives a list, KEY=VALUE entries
a mapping, `A:B` a nested key's fields in order (`--topology required:block`). `--region` is the
flag of two keys: one plain region is `region`, REGION=N entries are `regions` (a run across regions).
"""

from __future__ import annotations

from typing import Any, get_origin

from contract import codec
from contract.problem import Invalid
from gkr import keys
from gkr.spec import JobSpec

Flags = dict[str, tuple[str, Any]]  # job key -> (the flag that set it, its value as the job file writes it)


def by_flag(cls: type = JobSpec) -> dict[str, list[keys.Key]]:
    """Each flag and the keys it sets (one, or a plain key and a mapping: `--region`)."""
    out: dict[str, list[keys.Key]] = {}
    for key in keys.top(cls):
        if key.setting.flag:
            out.setdefault(key.setting.flag, []).append(key)
    return out


def from_flags(given: dict[str, Any], cls: type = JobSpec) -> Flags:
    """`given`: flag -> what the command line gave (None, False or empty when not given); Invalid for a malformed one."""
    table = by_flag(cls)
    out: Flags = {}
    for flag, value in given.items():
        if value is None or value is False or value in ((), []):
            continue
        key, value = _which(table[flag], value)
        out[key.path] = (flag, _value(key, flag, value))
    return out


def _which(candidates: list[keys.Key], value: Any) -> tuple[keys.Key, Any]:
    """The key a value is for: with a plain key and a mapping sharing the flag, one plain value is the plain key."""
    if len(candidates) == 1:
        return candidates[0], value
    plain = next(k for k in candidates if get_origin(k.kind) is not dict)
    mapping = next(k for k in candidates if get_origin(k.kind) is dict)
    if isinstance(value, str):  # the command's option takes one value: it names the plain key only
        return plain, value
    return (plain, value[0]) if len(value) == 1 and "=" not in value[0] else (mapping, value)


def _value(key: keys.Key, flag: str, value: Any) -> Any:
    if key.kind is bool:
        return not codec.default_of(key.field)
    inner = keys.nested(key.kind)
    if get_origin(key.kind) is dict:
        return _mapping(flag, value) if inner is None else _named(flag, value, keys.placeholder(key), inner)
    if inner is not None:
        return _fields(flag, value, inner)
    return list(value) if isinstance(value, tuple | list) else value


def _mapping(flag: str, values: list[str]) -> dict[str, str]:
    """KEY=VALUE entries (`--env`)."""
    out = {}
    for item in values:
        name, sep, text = item.partition("=")
        if not sep:
            raise Invalid([f"flag {flag}: {item!r} is not KEY=VALUE"])
        out[name] = text
    return out


def _named(flag: str, values: list[str], noun: str, cls: type) -> dict[str, dict[str, int]]:
    """NAME=N entries of a mapping of nested keys (`--region us-central1=4`): N is the nested class's first key."""
    first = keys.top(cls)[0].path
    out: dict[str, dict[str, int]] = {}
    for item in values:
        name, sep, text = item.partition("=")
        if not (sep and text.isascii() and text.isdigit()):
            alone = f"give one {noun.lower()} alone or each as {noun[0]}=N"  # the flag's plain key takes one name
            raise Invalid([f"flag {flag}: {item!r} is not {noun}={first.upper()}; {alone}"])
        if name in out:
            raise Invalid([f"flag {flag}: {name} is given twice; give each {noun.lower()} once"])
        out[name] = {first: int(text)}
    return out


def _fields(flag: str, value: str, cls: type) -> dict[str, str]:
    """`A:B` as the nested class's keys in order; a part left out (or empty) keeps its default."""
    names = [k.path for k in keys.top(cls)]
    parts = value.split(":")
    if len(parts) > len(names):
        raise Invalid(
            [f"flag {flag}: {value!r} is not {':'.join(n.upper() for n in names)}; give at most {len(names)}"]
        )
    return {name: part for name, part in zip(names, parts, strict=False) if part}


def as_flags(values: dict[str, Any], cls: type = JobSpec) -> Flags:
    """Job keys with values already in the job file's shape, each named by its flag (None: not given)."""
    table = keys.flags(cls)
    return {key: (table[key], value) for key, value in values.items() if value is not None}
