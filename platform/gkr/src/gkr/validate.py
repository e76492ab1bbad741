"""Rendered manifests against the pinned CRD schemas packaged with gkr (see fleet.gitops.schemas)."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any


@cache
def _schema(api_version: str, kind: str) -> Any:
    group, _, version = api_version.rpartition("/")
    name = f"{group}_{version}_{kind}.json"
    path = resources.files("gkr").joinpath("schemas", name)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def schema_problems(obj: dict[str, Any]) -> list[str]:
    schema = _schema(str(obj.get("apiVersion")), str(obj.get("kind")))
    if schema is None:
        return []  # built-in kinds: the API server validates them on apply
    import jsonschema

    where = f"{obj['kind']} {obj['metadata']['name']}"
    errors = jsonschema.Draft202012Validator(schema).iter_errors(obj)
    return [f"{where}: {'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}" for e in errors]
