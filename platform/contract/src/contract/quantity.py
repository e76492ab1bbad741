"""Kubernetes resource quantities (`500m`, `32Gi`, `1e3`) as exact fractions (pure).

The grammar is apimachinery's `resource.ParseQuantity` (k8s.io/apimachinery/pkg/api/resource/quantity.go):
a signed decimal number, then a binary suffix (Ki..Ei), a decimal suffix (n, u, m, "", k, M..E) or a
decimal exponent (`e3`, `E-2`). The API server accepts a JSON number for a quantity as well (its
`UnmarshalJSON` parses the digits unquoted), so an int or float from YAML is read as its decimal text.
One parser for every reader of rendered objects (the twin's kubelet and KubeRay, fleet.controllers' Kueue
quotas). Two readings KubeRay uses (ray-operator/controllers/ray/common/pod.go at 59d663ae):
`ceil_value` is `Quantity.Value()` (rounded up, away from zero) and `approximate` is
`AsApproximateFloat64()`.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# The exponent form is tried before the bare "E" (exa) suffix: "1E3" is 1000, "1E" is 10**18.
_QUANTITY = re.compile(r"([+-]?)(\d+\.?\d*|\.\d+)([eE][+-]?\d{1,3}|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)")
MAX_CHARS = 64  # no quantity we read is longer; a hostile one stays cheap to parse


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity."""


def parse(value: object) -> Fraction:
    """The quantity's exact value; QuantityError names what is wrong."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(f"{value!r} is not a quantity (a string such as 500m or 32Gi)")
    text = str(value)
    if len(text) > MAX_CHARS:
        raise QuantityError(f"{text[:MAX_CHARS]}... is longer than {MAX_CHARS} characters")
    found = _QUANTITY.fullmatch(text)
    if found is None:
        raise QuantityError(f"{text!r} is not a quantity (a number, then Ki..Ei, m, k..E or an exponent)")
    sign, number, suffix = found.groups()
    amount = Fraction(number)
    if suffix in _BINARY:
        amount *= _BINARY[suffix]
    else:
        exponent = int(suffix[1:]) if suffix[:1] in ("e", "E") and len(suffix) > 1 else _DECIMAL[suffix]
        amount *= Fraction(10) ** exponent
    return -amount if sign == "-" else amount


def ceil_value(amount: Fraction) -> int:
    """`Quantity.Value()`: the integer value, rounded up away from zero (500m -> 1)."""
    return math.ceil(amount) if amount >= 0 else -math.ceil(-amount)


def approximate(amount: Fraction) -> float:
    """`Quantity.AsApproximateFloat64()`."""
    return float(amount)
