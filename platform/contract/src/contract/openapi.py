"""The part of OpenAPI v3 that CRD schemas use, as a validator: standard library only, pure.

Types, properties, required, additionalProperties, items, enum, bounds, patterns,
allOf/anyOf, and Kubernetes' int-or-string and preserve-unknown-fields. It loads
in a millisecond where jsonschema takes tens (gkr must start fast);
tests/gkr/test_render.py checks it agrees with jsonschema.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def _is(value: Any, kind: str) -> bool:
    if isinstance(value, bool) and kind in ("integer", "number"):
        return False
    return isinstance(value, _TYPES[kind])


def errors(value: Any, schema: dict[str, Any], path: str = "") -> Iterator[str]:
    """Each way `value` breaks `schema`, one line each: `<dotted path>: <what>`."""
    where = path or "(root)"
    if schema.get("x-kubernetes-int-or-string"):
        if not (_is(value, "integer") or _is(value, "string")):
            yield f"{where}: {value!r} is not an integer or a string"
        return
    kinds = schema.get("type")
    if kinds is not None:
        allowed = kinds if isinstance(kinds, list) else [kinds]
        if not any(_is(value, k) for k in allowed):
            yield f"{where}: {value!r} is not of type {' or '.join(repr(k) for k in allowed)}"
            return
    if "enum" in schema and value not in schema["enum"]:
        yield f"{where}: {value!r} is not one of {schema['enum']!r}"
    for sub in schema.get("allOf", []):
        yield from errors(value, sub, path)
    if "anyOf" in schema and all(list(errors(value, sub, path)) for sub in schema["anyOf"]):
        yield f"{where}: {value!r} matches none of the allowed forms"
    if isinstance(value, dict):
        yield from _object(value, schema, path)
    elif isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            yield f"{where}: needs at least {schema['minItems']} items"
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            yield f"{where}: holds more than {schema['maxItems']} items"
        items = schema.get("items")
        if isinstance(items, dict):
            for index, item in enumerate(value):
                yield from errors(item, items, f"{path}.{index}" if path else str(index))
    elif isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            yield f"{where}: {value!r} is longer than {schema['maxLength']}"
        if "minLength" in schema and len(value) < schema["minLength"]:
            yield f"{where}: {value!r} is shorter than {schema['minLength']}"
        if "pattern" in schema and not re.search(schema["pattern"], value):
            yield f"{where}: {value!r} does not match {schema['pattern']!r}"
    elif _is(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            yield f"{where}: {value!r} is less than the minimum of {schema['minimum']!r}"
        if "maximum" in schema and value > schema["maximum"]:
            yield f"{where}: {value!r} is greater than the maximum of {schema['maximum']!r}"


def _object(value: dict[str, Any], schema: dict[str, Any], path: str) -> Iterator[str]:
    where = path or "(root)"
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    properties = schema.get("properties", {})
    for key in schema.get("required", []):
        if key not in value:
            yield f"{where}: {key!r} is a required property"
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        child = f"{path}.{key}" if path else key
        if key in properties:
            yield from errors(item, properties[key], child)
        elif extra is False:
            yield f"{where}: additional property {key!r} is not allowed"
        elif isinstance(extra, dict):
            yield from errors(item, extra, child)
