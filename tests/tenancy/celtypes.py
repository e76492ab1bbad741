"""The field half of the API server's type check of admission policies, offline.

The API server type-checks every CEL expression of a ValidatingAdmissionPolicy against the schema of
each kind its matchConstraints select, and reports a field a kind does not have
(https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/#type-checking);
CEL's `has()` does not help, as it too is checked. The CEL library the tests evaluate with has no
checker with declared types, so this reads every `object.<field>...` chain from the expression text and
walks it through the kind's schema: Kubernetes' own (kubernetes-validate's, for the fleet's minor) or
the pinned CRD's. Chains through comprehension variables and `variables.*` are not followed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate

from fleet.gitops.validate import CrdSchemas

# (apiGroup, resource) -> (version, kind) of `object` for the resources the fleet's policies match.
KINDS = {
    ("", "pods"): ("v1", "Pod"),
    ("", "pods/ephemeralcontainers"): ("v1", "Pod"),  # the subresource's object is the Pod
    ("", "services"): ("v1", "Service"),
    ("", "nodes"): ("v1", "Node"),
    ("", "nodes/status"): ("v1", "Node"),
    ("batch", "jobs"): ("v1", "Job"),
    ("apps", "deployments"): ("v1", "Deployment"),
    ("ray.io", "rayclusters"): ("v1", "RayCluster"),
    ("ray.io", "rayjobs"): ("v1", "RayJob"),
    ("argoproj.io", "applications"): ("v1alpha1", "Application"),
}
# `object` not preceded by a letter or a dot (so not oldObject, namespaceObject, x.object), then .fields.
_CHAIN = re.compile(r"(?<![\w.])object((?:\.[A-Za-z_]\w*)+)(\s*\()?")


def object_chains(expression: str) -> Iterator[tuple[str, ...]]:
    """Every `object.a.b` field chain; a trailing name called as a function (`.map(`) is a macro, not a field."""
    for match in _CHAIN.finditer(expression):
        fields = tuple(match.group(1)[1:].split("."))
        yield fields[:-1] if match.group(2) else fields


def matched_kinds(policy: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(group, version, kind) of every resource the policy's rules select."""
    found = []
    for rule in policy["spec"]["matchConstraints"]["resourceRules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                version, kind = KINDS[(group, resource)]
                found.append((group, version, kind))
    return sorted(set(found))


@cache
def _core(kubernetes: str) -> Path:
    return Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{kubernetes}.0-local-strict"


@cache
def _definitions(kubernetes: str) -> dict[str, Any]:
    defs: dict[str, Any] = json.loads((_core(kubernetes) / "_definitions.json").read_text())["$defs"]
    return defs


def kind_schema(group: str, version: str, kind: str, kubernetes: str, crds: CrdSchemas) -> dict[str, Any]:
    if group in ("", "apps", "batch"):
        name = f"{kind.lower()}-{group + '-' if group else ''}{version}.json"
        schema: dict[str, Any] = json.loads((_core(kubernetes) / name).read_text())
        return schema
    found = crds.schema(group, version, kind)
    assert found is not None, f"no pinned CRD schema for {group}/{version} {kind}"
    return dict(found)


def missing_field(schema: dict[str, Any], chain: tuple[str, ...], kubernetes: str) -> str | None:
    """The first prefix of `chain` that names no field, or None (a map or open object takes any name)."""
    node = schema
    for at, name in enumerate(chain):
        while "$ref" in node:
            node = _definitions(kubernetes)[node["$ref"].rsplit("/", 1)[1]]
        properties = node.get("properties")
        if properties is None:
            return None
        if name not in properties:
            return ".".join(chain[: at + 1])
        node = properties[name]
    return None
