"""The registry, published in each cluster: a ConfigMap that every team's researchers may read.

gkr installed outside the repository has no generated/ folder; it fetches the
same registry (and the schemas it validates against) from the cluster it talks
to: `kubectl get configmap -n meridian-registry meridian-registry`
(contract.registry REGISTRY_NAMESPACE, REGISTRY_CONFIGMAP).

- `data[registry.json]`: generated/registry.json, byte for byte;
- `binaryData[<schema file>.gz]`: each of generated/schemas/, gzip-compressed. The schemas are
  about 420 KB of JSON, most of a ConfigMap's 1 MiB; compressed the whole object is under 40 KB.
  The `registry` application also syncs with server-side apply, so no last-applied-configuration
  annotation (256 KiB for all of an object's annotations) holds a second copy: the ConfigMap's own
  1 MiB is the only limit, and tests/gitops/test_registry.py keeps the object under half of it.

Who may read it: a Role with `get` on this one ConfigMap, bound to every team's Google group (the
subjects the team RBAC binds, fleet.gitops.teams), never `system:authenticated`, which on GKE is
any Google account.
"""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Mapping

from contract.registry import FILE, GZIP, REGISTRY_CONFIGMAP, REGISTRY_NAMESPACE
from fleet.gitops.objects import Obj, obj
from fleet.gitops.teams import team_subjects
from fleet.model import Fleet

RBAC = "rbac.authorization.k8s.io/v1"
READER_ROLE = "meridian-registry-reader"
# Nothing runs here: Pod Security "restricted" everywhere, so a pod slipped in gets the least.
POD_SECURITY = ("enforce", "audit", "warn")

# A fixed gzip header (RFC 1952): deflate, no flags, no time, maximum compression, OS unknown, so the
# bytes depend on nothing but the text (gzip.compress writes the local OS, and the time unless told not to).
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"


def gzip_bytes(text: str) -> bytes:
    """`text` as UTF-8, gzip-compressed the same way on every machine (gzip.decompress reads it)."""
    data = text.encode("utf-8")
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = deflate.compress(data) + deflate.flush()
    return _GZIP_HEADER + body + struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)


def registry_configmap(registry_json: str, schemas: Mapping[str, str]) -> Obj:
    binary = {f"{name}{GZIP}": base64.b64encode(gzip_bytes(text)).decode("ascii") for name, text in schemas.items()}
    return obj(
        "v1",
        "ConfigMap",
        REGISTRY_CONFIGMAP,
        REGISTRY_NAMESPACE,
        data={FILE: registry_json},
        binaryData=dict(sorted(binary.items())),
    )


def registry_objects(fleet: Fleet, registry_json: str, schemas: Mapping[str, str]) -> list[Obj]:
    """The `registry` application: its namespace, the ConfigMap, and read access for the teams."""
    version = f"v{fleet.versions.kubernetes}"
    labels = {}
    for mode in POD_SECURITY:
        labels[f"pod-security.kubernetes.io/{mode}"] = "restricted"
        labels[f"pod-security.kubernetes.io/{mode}-version"] = version
    rule = {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [REGISTRY_CONFIGMAP], "verbs": ["get"]}
    return [
        obj("v1", "Namespace", REGISTRY_NAMESPACE, labels=labels),
        registry_configmap(registry_json, schemas),
        obj(RBAC, "Role", READER_ROLE, REGISTRY_NAMESPACE, rules=[rule]),
        obj(
            RBAC,
            "RoleBinding",
            READER_ROLE,
            REGISTRY_NAMESPACE,
            roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": READER_ROLE},
            subjects=team_subjects(fleet),
        ),
    ]
