"""The CRD schemas gkr validates its manifests against, from the pinned CRDs (laptops have no ../shared/crds).

`make generate` writes them to generated/schemas/ and, compressed, into each
cluster's registry ConfigMap (fleet.gitops.registry). Descriptions are dropped
(they are most of a CRD's size); the strictness the validator adds (unknown
fields rejected) is kept.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contract.registry import schema_file
from fleet.gitops.validate import CrdSchemas, crd_folders, crd_roots
from fleet.model import Fleet

KINDS = (("ray.io", "v1", "RayJob"), ("ray.io", "v1", "RayCluster"))


def _strip(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _strip(v) for k, v in schema.items() if k != "description"}
    if isinstance(schema, list):
        return [_strip(v) for v in schema]
    return schema


def crd_schemas(fleet: Fleet, repo: Path) -> dict[str, str]:
    """{file name (contract.registry.schema_file): the kind's schema as compact JSON}, for each of KINDS.

    FileNotFoundError (one line) when the pinned CRDs are not on this machine.
    """
    crds = CrdSchemas(crd_folders(fleet), crd_roots(repo))
    files = {}
    for group, version, kind in KINDS:
        schema = crds.schema(group, version, kind)
        if schema is None:
            raise FileNotFoundError(
                f"no CRD for {group}/{version} {kind}: run `make setup` (it gets the pinned CRDs) or provide ../shared/crds"
            )
        files[schema_file(group, version, kind)] = (
            json.dumps(_strip(schema), sort_keys=True, separators=(",", ":")) + "\n"
        )
    return files
