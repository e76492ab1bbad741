"""Reading a pod, and the objects of its namespace, from hostile plain data (pure).

A pod dict comes from our own renders, but a field of the wrong type or a missing name must still end
in one line that names the pod, the container and the field, never a KeyError. Each accessor checks
the type the core/v1 API gives the field (k8s.io/api/core/v1/types.go); an absent or null field reads
as its zero value, as the API server's decoder reads it.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from contract.problem import Invalid


class PodError(Invalid):
    """A pod the twin cannot run as the kubelet would: one line, where (pod, container, field) and what."""

    def __init__(self, line: str) -> None:
        super().__init__([line])
        self.line = line


@dataclass(frozen=True)
class Where:
    """A place in one pod, for messages: `pod team-a/x, container main: spec.containers[0].env[2]`."""

    pod: str
    path: str = "spec"
    container: str = ""

    def at(self, part: str | int) -> Where:
        if isinstance(part, int):
            return Where(self.pod, f"{self.path}[{part}]", self.container)
        path = f"{self.path}.{part}" if self.path else part
        return Where(self.pod, path, self.container)

    def inside(self, container: str) -> Where:
        return Where(self.pod, self.path, container)

    def fail(self, what: str) -> NoReturn:
        who = f"pod {self.pod}, container {self.container}" if self.container else f"pod {self.pod}"
        raise PodError(f"{who}: {self.path}: {what}")


def mapping(obj: Mapping[str, Any], key: str, w: Where) -> Mapping[str, Any]:
    """A nested object; absent or null reads as empty."""
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        w.at(key).fail(f"is a {type(value).__name__}, not a mapping")
    return value


def items(obj: Mapping[str, Any], key: str, w: Where) -> list[tuple[Where, Mapping[str, Any]]]:
    """A list of objects, each with its place for messages; absent or null reads as empty."""
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        w.at(key).fail(f"is a {type(value).__name__}, not a list")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            w.at(key).at(i).fail(f"is a {type(item).__name__}, not a mapping")
        out.append((w.at(key).at(i), item))
    return out


def text(obj: Mapping[str, Any], key: str, w: Where, *, required: bool = False) -> str:
    """A string; absent reads as "" unless the field is required (the API's `+required`)."""
    value = obj.get(key)
    if value is None or (required and value == ""):
        if required:
            w.at(key).fail("is missing; set it")
        return ""
    if not isinstance(value, str):
        w.at(key).fail(f"is {value!r}, not a string; quote it")
    return value


def strings(obj: Mapping[str, Any], key: str, w: Where) -> tuple[str, ...]:
    """A []string such as command or args; a number in it is refused as the API server refuses it."""
    value = obj.get(key)
    if value is None:
        return ()
    if not isinstance(value, list):
        w.at(key).fail(f"is a {type(value).__name__}, not a list of strings")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            w.at(key).at(i).fail(f"is {item!r}, not a string; quote it")
    return tuple(value)


def string_map(obj: Mapping[str, Any], key: str, w: Where) -> dict[str, str]:
    """A map[string]string such as labels, annotations or a ConfigMap's data."""
    found = mapping(obj, key, w)
    for k, v in found.items():
        if not isinstance(v, str):
            w.at(key).at(k).fail(f"is {v!r}, not a string; quote it")
    return dict(found)


def integer(obj: Mapping[str, Any], key: str, w: Where, default: int | None = None) -> int | None:
    value = obj.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        w.at(key).fail(f"is {value!r}, not a whole number")
    if not -(2**63) <= value < 2**63:
        w.at(key).fail(f"{value} does not fit an int64")
    return value


def flag(obj: Mapping[str, Any], key: str, w: Where) -> bool | None:
    value = obj.get(key)
    if value is None or isinstance(value, bool):
        return value
    w.at(key).fail(f"is {value!r}, not true or false")


@dataclass(frozen=True)
class Objects:
    """The rendered ConfigMaps and Secrets of the pod's namespace, by name, as the API holds them.

    A Secret's `data` is base64 text and its `stringData` plain text that the API server merges over
    `data` on write (core/v1 Secret: "stringData ... is merged into the data field on write,
    overwriting any existing values"); a ConfigMap's `binaryData` is base64 text as well.
    """

    config_maps: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    secrets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_documents(cls, docs: Iterable[Any], namespace: str) -> Objects:
        """The ConfigMaps and Secrets of `namespace` among rendered documents (others are skipped)."""
        found: dict[str, dict[str, Mapping[str, Any]]] = {"ConfigMap": {}, "Secret": {}}
        for doc in docs:
            if not isinstance(doc, Mapping) or doc.get("kind") not in found:
                continue
            meta = doc.get("metadata")
            if isinstance(meta, Mapping) and meta.get("namespace", namespace) == namespace:
                name = meta.get("name")
                if isinstance(name, str):
                    found[str(doc["kind"])][name] = doc
        return cls(config_maps=found["ConfigMap"], secrets=found["Secret"])

    def config_map(self, name: str, w: Where) -> dict[str, bytes] | None:
        """Every key of the ConfigMap (data, then binaryData), or None when there is no such ConfigMap."""
        text_keys = self.config_map_text(name, w)
        if text_keys is None:
            return None
        where = Where(w.pod, f"ConfigMap {name}")
        binary = string_map(self.config_maps[name], "binaryData", where)
        data = {k: v.encode() for k, v in text_keys.items()}
        return data | {k: _base64(v, where.at("binaryData").at(k)) for k, v in binary.items()}

    def config_map_text(self, name: str, w: Where) -> dict[str, str] | None:
        """The ConfigMap's `data` alone: what envFrom and configMapKeyRef read (binaryData is for volumes)."""
        obj = self.config_maps.get(name)
        return None if obj is None else string_map(obj, "data", Where(w.pod, f"ConfigMap {name}"))

    def secret(self, name: str, w: Where) -> dict[str, bytes] | None:
        """Every key of the Secret (data decoded, stringData over it), or None when there is none."""
        obj = self.secrets.get(name)
        if obj is None:
            return None
        where = Where(w.pod, f"Secret {name}")
        data = {k: _base64(v, where.at("data").at(k)) for k, v in string_map(obj, "data", where).items()}
        return data | {k: v.encode() for k, v in string_map(obj, "stringData", where).items()}


def _base64(value: str, w: Where) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        w.fail("is not base64; encode the value (base64 -w0) or move it to stringData")
