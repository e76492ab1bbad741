"""Rendered manifests against the pinned CRD schemas of the fleet registry (its schemas/ folder).

`make generate` writes them beside registry.json (descriptions dropped), and `gkr registry
fetch` copies them from a cluster; contract.openapi checks an object against one.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from contract import registry
from contract.openapi import errors
from contract.problem import Invalid

# The kinds gkr renders whose schema the API server does not know without the CRD: each must be there.
CRD_GROUPS = ("ray.io",)


def schema_file(schemas: Path, api_version: str, kind: str) -> Path:
    group, _, version = api_version.rpartition("/")
    return schemas / registry.schema_file(group, version, kind)


@cache
def _schema(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as exc:
        raise Invalid(
            [f"{path}: not a JSON schema ({exc}); regenerate it (`make generate` or `gkr registry fetch`)"]
        ) from None


def schema_problems(obj: dict[str, Any], schemas: Path) -> list[str]:
    """One line per way `obj` breaks its CRD's schema; Invalid when a CRD kind has no schema file."""
    api_version, kind = str(obj.get("apiVersion")), str(obj.get("kind"))
    path = schema_file(schemas, api_version, kind)
    schema = _schema(path)
    if schema is None:
        if api_version.rpartition("/")[0] in CRD_GROUPS:
            raise Invalid([f"{path}: missing; regenerate the registry (`make generate`) or `gkr registry fetch` it"])
        return []  # built-in kinds: the API server validates them on apply
    return [f"{kind} {obj['metadata']['name']}: {message}" for message in errors(obj, schema)]
