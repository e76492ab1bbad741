"""Read a fleet spec from a file: parse, validate, plan addresses and quotas.

Everything wrong is collected and raised at once as a Invalid whose lines
read `FILE:LINE: PATH: what is wrong; how to fix it`.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from pathlib import Path as FilePath
from typing import Any

import pydantic

import safeyaml
from contract.problem import Invalid, Path, Problem, dotted, one_of
from fleet import objectquota, rules
from fleet.model import Fleet
from fleet.planner import AddressPlan, plan_addresses
from fleet.quotaplan import QuotaPlan, plan_quotas
from fleet.yamlsource import Source, YamlSyntaxError, parse


@dataclass(frozen=True)
class LoadedFleet:
    path: FilePath
    fleet: Fleet
    addresses: AddressPlan
    quotas: QuotaPlan  # every consumer of quotas reads this, never the spec's numbers (DESIGN.md)


def load(path: str | FilePath) -> LoadedFleet:
    file = FilePath(path)
    try:
        text = safeyaml.read_text(file)
    except FileNotFoundError:
        raise Invalid([f"{file}: no such file; pass the fleet spec's path (FLEET=path/to/fleet.yaml)"]) from None
    except OSError as exc:
        raise Invalid([f"{file}: cannot read it ({exc}); check the path and that it is UTF-8 text"]) from None
    except safeyaml.YamlError as exc:
        raise Invalid([f"{file}:{exc.line}: {exc.message}"]) from None
    return load_text(text, str(file))


def load_text(text: str, name: str = "fleet.yaml") -> LoadedFleet:
    try:
        source, problems = parse(text)
    except YamlSyntaxError as exc:
        raise Invalid([f"{name}:{exc.line}: {exc.message}"]) from None
    if not isinstance(source.data, dict):
        raise Invalid(
            [f"{name}:1: the spec must be a YAML mapping with project, regions, teams...; see the shipped fleet.yaml"]
        )
    try:
        fleet = Fleet.model_validate(source.data)
    except pydantic.ValidationError as exc:
        raise Invalid(_format(name, source, [*problems, *_from_pydantic(exc)])) from None
    problems.extend(rules.check(fleet))
    addresses, address_problems = plan_addresses(fleet)
    problems.extend(address_problems)
    quotas, quota_problems = plan_quotas(fleet)
    problems.extend(quota_problems)
    services = {ranges.region: ranges.services.cidr for ranges in addresses.regions}
    if set(services) == {r.name for r in fleet.regions}:  # else the address plan's problems say why
        problems.extend(objectquota.problems(fleet, services))
    if problems:
        raise Invalid(_format(name, source, problems))
    return LoadedFleet(FilePath(name), fleet, addresses, quotas)


def _format(name: str, source: Source, problems: list[Problem]) -> list[str]:
    ordered = sorted(problems, key=lambda p: (source.line_of(p.path), dotted(p.path)))
    return [f"{name}:{source.line_of(p.path)}: {dotted(p.path)}: {p.message}" for p in ordered]


# Strict fields (model.Int, Float, Bool): what each expects, in words.
_STRICT = {"int_type": "a whole number", "float_type": "a number", "bool_type": "true or false"}


def _from_pydantic(exc: pydantic.ValidationError) -> list[Problem]:
    problems = []
    for error in exc.errors():
        # Union members and validator wrappers show up in `loc` as strings such
        # as "function-after[...]"; they are not part of the document's path.
        path: Path = tuple(p for p in error["loc"] if isinstance(p, int) or "[" not in p)
        kind = error["type"]
        if kind == "missing":
            message = "is required; add it"
        elif kind == "extra_forbidden":
            allowed = _fields_at(path[:-1])
            message = f"unknown field; {one_of(allowed, str(path[-1]))}" if allowed else "unknown field; remove it"
        elif kind == "value_error":
            message = error["msg"].removeprefix("Value error, ")
        elif kind in _STRICT:
            got = error["input"]
            fix = "write it without quotes" if isinstance(got, str) else f"write {_STRICT[kind]}"
            message = f"must be {_STRICT[kind]}, not {type(got).__name__} {got!r}; {fix}"
        else:
            message = f"{error['msg']} (got {error['input']!r})"
        problems.append(Problem(path=path, message=message))
    # One problem per path: a union reports each failed member separately.
    return list({p.path: p for p in reversed(problems)}.values())[::-1]


def _fields_at(path: Path) -> list[str]:
    """Field names of the model found at `path` in the Fleet schema, if it is one."""
    kind: Any = Fleet
    for part in path:
        kind = _unwrap(kind)
        if isinstance(kind, type) and issubclass(kind, pydantic.BaseModel):
            field = kind.model_fields.get(str(part))
            if field is None:
                return []
            kind = field.annotation
        elif typing.get_origin(kind) in (tuple, dict):
            kind = typing.get_args(kind)[-1 if typing.get_origin(kind) is dict else 0]
        else:
            return []
    kind = _unwrap(kind)
    if isinstance(kind, type) and issubclass(kind, pydantic.BaseModel):
        return list(kind.model_fields)
    return []


def _unwrap(kind: Any) -> Any:
    """Strip Optional[...] and Annotated[...] down to the type inside."""
    while True:
        if typing.get_origin(kind) is typing.Annotated:
            kind = typing.get_args(kind)[0]
        elif typing.get_origin(kind) in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(kind) if a is not type(None)]
            kind = members[0]
        else:
            return kind
