"""Offline validation of what Argo CD will apply.

Built-in kinds are checked with kubernetes-validate (strict) for the clusters'
Kubernetes minor; custom resources against the `openAPIV3Schema` of their
pinned upstream CRDs, made strict the way the API server's field validation
is: unknown fields are errors unless the schema preserves them. A CRD that
cannot be found is an error, never a skip.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from fleet.gitops.objects import Obj
from fleet.model import Fleet

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Folder under a CRD root for each API group, and the version of it that is pinned.
GKE_NETWORKING_API = "v0.2.0"
# Google Cloud Managed Service for Prometheus' CRDs; GKE installs and upgrades them with managed collection.
GMP_API = "v0.17.2"


def crd_folders(fleet: Fleet) -> dict[str, str]:
    v = fleet.versions
    return {
        "ray.io": f"kuberay/v{v.kuberay}",
        "kueue.x-k8s.io": f"kueue/v{v.kueue}",
        "argoproj.io": f"argo-cd/v{v.argocd}",
        "networking.gke.io": f"gke-networking-api/{GKE_NETWORKING_API}",
        "monitoring.googleapis.com": f"prometheus-engine/{GMP_API}",
    }


# The checkout this code runs from (an editable install): its CRDs serve any --root.
CHECKOUT = Path(__file__).resolve().parents[5]


def crd_roots(repo: Path) -> list[Path]:
    """Where CRDs are looked for: $MERIDIAN_CRDS, ../shared/crds, then the cache scripts/fetch_crds.py fills,
    beside `repo` and beside this code's checkout."""
    roots = [Path(p) for p in os.environ.get("MERIDIAN_CRDS", "").split(os.pathsep) if p]
    for base in dict.fromkeys([repo, CHECKOUT]):
        roots += [base.parent / "shared" / "crds", base / ".cache" / "crds"]
    return roots


@dataclass(frozen=True)
class Finding:
    where: str  # cluster/app or file
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


def build(path: Path, kubectl: str = "kubectl") -> list[Obj]:
    """`kubectl kustomize PATH`: a real kustomize build."""
    result = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(f"kubectl kustomize {path} failed: {result.stderr.strip()}")
    return [d for d in yaml.load_all(result.stdout, Loader=_Loader) if d]


class BuildError(Exception):
    pass


def _strict(schema: Any) -> Any:
    """Reject unknown fields where the schema lists its properties, as the API server does."""
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        if isinstance(schema.get("pattern"), str):
            schema["pattern"] = re.sub(r"^\^\(\?([a-z]+)\)", r"(?\1)^", schema["pattern"])
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@functools.cache
def _parsed_crd(file: Path, mtime_ns: int, size: int) -> Any:
    """A CRD file as parsed, once per process while the file stays as it was (`mtime_ns`, `size`): a process
    that generates or checks several trees (the review's tests, `meridian generate` per scenario) reads the
    same pinned CRDs, megabytes of YAML, each time. Read only: callers build their schemas from it (_strict)."""
    return yaml.load(file.read_text(encoding="utf-8"), Loader=_Loader)


def read_crd(file: Path) -> Any:
    """A pinned CRD file, parsed once per process while it stays as it was (read only)."""
    stat = file.stat()
    return _parsed_crd(file, stat.st_mtime_ns, stat.st_size)


class CrdSchemas:
    """openAPIV3Schemas of the pinned CRDs, loaded per API group on first use."""

    def __init__(self, folders: dict[str, str], roots: Iterable[Path]) -> None:
        self.folders = folders
        self.roots = list(roots)
        self._by_group: dict[str, dict[tuple[str, str], Any]] = {}

    def folder(self, group: str) -> Path | None:
        relative = self.folders.get(group)
        if relative is None:
            return None
        return next((root / relative for root in self.roots if (root / relative).is_dir()), None)

    def schema(self, group: str, version: str, kind: str) -> Any:
        if group not in self._by_group:
            self._by_group[group] = self._load(group)
        return self._by_group[group].get((version, kind))

    def _load(self, group: str) -> dict[tuple[str, str], Any]:
        folder = self.folder(group)
        if folder is None:
            return {}
        schemas = {}
        for file in sorted(folder.glob("*.yaml")):
            crd = read_crd(file)
            if crd.get("spec", {}).get("group") != group:
                continue
            kind = crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                schema = _strict(version["schema"]["openAPIV3Schema"])
                schema.setdefault("properties", {})["metadata"] = {"type": "object"}
                schemas[(version["name"], kind)] = schema
        return schemas


def validate_object(o: Obj, kubernetes: str, crds: CrdSchemas) -> list[str]:
    """Problems with one object; empty when it is valid."""
    api = str(o.get("apiVersion", ""))
    kind = str(o.get("kind", ""))
    group, _, version = api.rpartition("/")
    try:
        kubernetes_validate.validate(o, kubernetes, strict=True)
        return []
    except kubernetes_validate.ValidationError as exc:
        return [f"{'.'.join(str(p) for p in exc.absolute_path) or '(root)'}: {exc.message}"]
    except kubernetes_validate.SchemaNotFoundError:
        if "." not in group:
            return [f"{api} {kind} is not a Kubernetes {kubernetes} kind"]
    # A custom resource: the schema of its pinned CRD.
    schema = crds.schema(group, version, kind)
    if schema is None:
        where = crds.folder(group) or crds.folders.get(group, "no pinned CRD folder for this group")
        return [
            f"no CRD schema for {api} {kind} (looked in {where}); run `make setup` (it gets the pinned CRDs) "
            "or provide ../shared/crds"
        ]
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}" for e in validator.iter_errors(o)]


def object_id(o: Obj) -> tuple[str, str, str, str]:
    api = str(o.get("apiVersion", ""))
    group = api.rpartition("/")[0]
    meta = o.get("metadata", {})
    return group, str(o.get("kind")), str(meta.get("namespace", "")), str(meta.get("name"))


def images(o: Obj) -> Iterator[str]:
    """Every container image in a workload's pod template."""
    spec = o.get("spec", {})
    pod = spec.get("template", {}).get("spec", {}) if isinstance(spec, dict) else {}
    for key in ("initContainers", "containers"):
        for container in pod.get(key, []) or []:
            yield str(container.get("image", ""))
