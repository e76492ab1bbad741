"""What every part of the security class shares: a finding, and reading hostile lists and values."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from review.kubernetes import Obj


@dataclass(frozen=True)
class Finding:
    scope: str  # the cluster or the stack
    what: str  # the object and exactly what widened
    new_in: str = ""  # the namespace, when the object is new and so is its namespace (a new team, say)


def dicts(value: Any) -> list[Obj]:
    """The dict items of a list field; anything else is nothing (the input is hostile until validated)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b  # 0 is not False, 1 is not True


def listed(values: Iterable[Any], every: str) -> str:
    return ", ".join(f"* ({every})" if v == "*" else str(v) for v in sorted(set(map(str, values))))
