"""Reading a RayCluster or RayJob from hostile plain data, and the two ways the twin refuses one (pure).

Each accessor checks the type the CRD's schema gives the field (ray-operator/config/crd at 59d663ae)
and names the field's path when it is wrong, so a person sees one line: where, what, how to fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.quantity import QuantityError, parse


class KubeRayError(ValueError):
    """A RayCluster or RayJob the twin cannot turn into pods; the message is one line: where, what, fix."""


class Rejected(KubeRayError):
    """What the API server or KubeRay v1.7.0 itself refuses (schema, validation.go): fix the object."""


class Unsupported(KubeRayError):
    """What KubeRay supports but the twin does not model (an autoscaler sidecar, external Redis...)."""


class Where:
    """The object being read, for messages: `RayJob team-research/grpo-8b`."""

    def __init__(self, kind: str, namespace: str, name: str, spec: str = "spec") -> None:
        self.label = f"{kind} {namespace}/{name}"
        self.spec = spec  # where `spec` lies in what the person wrote: a RayJob's cluster is spec.rayClusterSpec

    def _at(self, path: str) -> str:
        return self.spec + path[4:] if path == "spec" or path.startswith("spec.") else path

    def rejected(self, path: str, what: str, fix: str) -> Rejected:
        return Rejected(f"{self.label}: {self._at(path)}: {what}; {fix}")

    def unsupported(self, path: str, what: str, fix: str) -> Unsupported:
        return Unsupported(f"{self.label}: {self._at(path)}: {what}; {fix}")

    def mapping(self, obj: object, path: str) -> dict[str, Any]:
        """A mapping (absent or null reads as empty, as the API server's decoder does)."""
        if obj is None:
            return {}
        if not isinstance(obj, dict) or not all(isinstance(k, str) for k in obj):
            raise self.rejected(path, f"is a {type(obj).__name__}, not a mapping", "write a mapping of names")
        return obj

    def items(self, obj: object, path: str) -> list[dict[str, Any]]:
        """A list of mappings (absent or null reads as empty)."""
        if obj is None:
            return []
        if not isinstance(obj, list):
            raise self.rejected(path, f"is a {type(obj).__name__}, not a list", "write a list")
        return [self.mapping(item, f"{path}[{i}]") for i, item in enumerate(obj)]

    def strings(self, obj: object, path: str) -> dict[str, str]:
        """A map[string]string such as rayStartParams or labels: every value must be a string."""
        found = self.mapping(obj, path)
        for key, value in found.items():
            if not isinstance(value, str):
                raise self.rejected(f"{path}.{key}", f"is {value!r}, not a string", "quote it")
        return dict(found)

    def text(self, obj: object, path: str, default: str = "") -> str:
        if obj is None:
            return default
        if not isinstance(obj, str):
            raise self.rejected(path, f"is {obj!r}, not a string", "write a string")
        return obj

    def integer(self, obj: object, path: str, default: int | None = None) -> int | None:
        if obj is None:
            return default
        if isinstance(obj, bool) or not isinstance(obj, int):
            raise self.rejected(path, f"is {obj!r}, not an integer", "write a whole number")
        if not -(2**31) <= obj < 2**31:
            raise self.rejected(path, f"{obj} does not fit an int32", "write a smaller number")
        return obj

    def flag(self, obj: object, path: str) -> bool:
        if obj is None:
            return False
        if not isinstance(obj, bool):
            raise self.rejected(path, f"is {obj!r}, not a boolean", "write true or false")
        return obj

    def quantities(self, resources: Mapping[str, Any], path: str, kind: str) -> dict[str, Any]:
        """A container's `limits` or `requests`, each value a valid quantity (the API server's check)."""
        found = self.mapping(resources.get(kind), f"{path}.{kind}")
        for name, value in found.items():
            try:
                parse(value)
            except QuantityError as exc:
                fix = "write a quantity such as 2, 500m or 8Gi"
                raise self.rejected(f"{path}.{kind}.{name}", str(exc), fix) from None
        return found
