"""How the Go standard library and apimachinery format what KubeRay and the kubelet write into a pod (pure).

KubeRay builds command lines with `strconv.Quote`, `encoding/json` and `fmt`, and names objects with
apimachinery's random suffixes; the twin must print the same bytes, so each is written down here once.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from decimal import Decimal

# k8s.io/apimachinery/pkg/util/rand: the alphabet of `rand.String` (GenerateRayClusterName,
# GenerateRayJobId) and of the API server's generateName suffix (names.SimpleNameGenerator).
ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"
SUFFIX_LENGTH = 5


def suffix(seed: str) -> str:
    """Five characters of KubeRay's alphabet, derived from `seed` instead of drawn at random.

    Upstream the suffix is random; the twin's is a hash of what it names, so the same input always
    yields the same pod and cluster names (and a real name's shape: a DNS label, 5 characters).
    """
    digest = hashlib.sha256(seed.encode()).digest()
    return "".join(ALPHANUMS[b % len(ALPHANUMS)] for b in digest[:SUFFIX_LENGTH])


def quote(text: str) -> str:
    """`strconv.Quote`: a double-quoted Go string literal."""
    out = ['"']
    short = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}
    for char in text:
        code = ord(char)
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char.isprintable():  # Go's IsPrint: letters, marks, numbers, punctuation, symbols, ASCII space
            out.append(char)
        elif char in short:
            out.append(short[char])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def json_encode(value: object) -> str:
    """`encoding/json.Marshal` of plain data: map keys sorted, no spaces, HTML characters escaped."""
    if isinstance(value, dict):
        items = sorted((str(k), v) for k, v in value.items())
        return "{" + ",".join(f"{_json_string(k)}:{json_encode(v)}" for k, v in items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(json_encode(v) for v in value) + "]"
    if isinstance(value, str):
        return _json_string(value)
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return json_float(value)
    raise TypeError(f"{type(value).__name__} has no JSON form")


def _json_string(text: str) -> str:
    encoded = json.dumps(text, ensure_ascii=False)
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028")):
        encoded = encoded.replace(char, escape)
    return encoded.replace("\u2029", "\\u2029")


def json_float(value: float) -> str:
    """encoding/json's float64: the shortest digits, plain between 1e-6 and 1e21, else `1e-07` as `1e-7`."""
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"{value} has no JSON form")
    magnitude = abs(value)
    if magnitude == 0 or 1e-6 <= magnitude < 1e21:
        text = format(Decimal(repr(value)), "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    mantissa, exponent = repr(value).split("e")
    sign = "-" if exponent.startswith("-") else "+"
    return f"{mantissa}e{sign}{int(exponent.lstrip('+-'))}"


_VERSION = re.compile(r"\s*v?([0-9]+(?:\.[0-9]+)*)(.*)", re.DOTALL)


def version_at_least(text: str, minimum: tuple[int, ...]) -> bool:
    """apimachinery `version.ParseGeneric(text).AtLeast(minimum)`; False where it does not parse.

    ParseGeneric wants two or more numeric parts, the first without a leading zero, and ignores
    whatever follows the numbers.
    """
    found = _VERSION.fullmatch(text)
    if found is None:
        return False
    parts = found.group(1).split(".")
    if len(parts) < 2 or (parts[0].startswith("0") and parts[0] != "0") or any(len(p) > 19 for p in parts):
        return False
    numbers = tuple(int(p) for p in parts)
    width = max(len(numbers), len(minimum))
    padded = numbers + (0,) * (width - len(numbers))
    return padded >= minimum + (0,) * (width - len(minimum))


def check_label(text: str) -> str:
    """utils.CheckLabel: at most 63 characters (the tail kept), no leading punctuation."""
    if len(text) > 63:
        text = text[len(text) - 63 :]
    if text and unicodedata.category(chr(text.encode()[0])).startswith("P"):  # unicode.IsPunct of the first byte
        text = "r" + text[1:]
    return text
