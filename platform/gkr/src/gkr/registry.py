"""Where gkr finds the fleet registry (contract.registry), and the copy `gkr registry fetch` keeps.

The registry is what `make generate` writes from fleet.yaml: `generated/registry.json`
and, beside it, `schemas/` (the CRD schemas gkr validates its manifests against). gkr
takes the first of:

1. `--registry PATH`: a folder holding registry.json and schemas/, or the registry.json itself;
2. `$GKR_REGISTRY`, the same;
3. `registry:` in the user config (gkr.config), the same;
4. the nearest `generated/registry.json` from the current folder upward (a checkout);
5. the copy fetched from a cluster: `$XDG_CACHE_HOME/gkr/registry/` (`gkr registry fetch`).

A registry of another schema version, or a broken one, is one line (contract.codec), exit 2.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from contract import registry as contract
from contract.problem import Invalid
from contract.registry import Registry

ENV = "GKR_REGISTRY"
REPLACED_ENV = "GKR_FLEET"  # before the registry: gkr read fleet.yaml itself
FETCHED = "registry"  # under the cache folder
# What a cluster's registry ConfigMap may hold: registry.json, and each schema gzip'ed under
# "<file name>.gz". A ConfigMap holds at most 1 MiB; a schema unpacks to at most this many bytes.
GZ = ".gz"
SCHEMA_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\.json")
MAX_SCHEMA_BYTES = 8 * 1024 * 1024
MAX_REGISTRY_BYTES = 4 * 1024 * 1024  # the shipped fleet's is 6 KB; a ConfigMap holds at most 1 MiB


@dataclass(frozen=True)
class Located:
    registry: Registry
    path: Path  # its registry.json
    how: str  # how it was found, for `gkr registry show`

    @property
    def schemas(self) -> Path:
        return self.path.parent / contract.SCHEMAS_DIR


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gkr"


def fetched_dir() -> Path:
    return cache_dir() / FETCHED


def _file(path: Path) -> Path:
    """registry.json in a folder, or the file itself."""
    return path / contract.FILE if path.is_dir() else path


def find(explicit: str | None, configured: str | None, config_file: Path, here: Path) -> tuple[Path, str]:
    """(registry.json, how it was found); Invalid (one line, what to do) when there is none."""
    replaced = os.environ.get(REPLACED_ENV)
    if replaced and not (explicit or os.environ.get(ENV)):
        generated = Path(replaced).expanduser().parent / contract.GENERATED_DIR
        raise Invalid([f"${REPLACED_ENV} is replaced by ${ENV}: set {ENV}={generated} (the folder `make generate` "
                       f"writes beside fleet.yaml) and unset {REPLACED_ENV}"])  # fmt: skip
    candidates = (
        (explicit, "--registry"),
        (os.environ.get(ENV), f"${ENV}"),
        (configured, f"`registry:` in {config_file}"),
    )
    for value, how in candidates:
        if value:
            path = Path(value).expanduser()
            if not path.exists():
                raise Invalid([f"{how}: {value}: no such file or folder; give the folder `make generate` writes "
                               f"({contract.GENERATED_DIR}/) or its {contract.FILE}"])  # fmt: skip
            return _file(path), how
    for folder in (here, *here.parents):
        candidate = folder / contract.GENERATED_DIR / contract.FILE
        if candidate.is_file():
            return candidate, f"the repository ({folder})"
    fetched = fetched_dir() / contract.FILE
    if fetched.is_file():
        return fetched, "fetched from a cluster (`gkr registry fetch`)"
    raise Invalid(
        [
            "no fleet registry: run `gkr registry fetch --region REGION` (reads it from the cluster), or pass "
            f"--registry <checkout>/{contract.GENERATED_DIR}, set {ENV}, or add `registry:` to {config_file}"
        ]
    )


def load(path: Path, how: str = "--registry") -> Located:
    """The registry in `path` (a folder or its registry.json); Invalid (one line) when it cannot be read."""
    path = _file(path)
    try:
        with path.open("rb") as handle:  # at most one byte past the limit: never all of /dev/zero
            raw = handle.read(MAX_REGISTRY_BYTES + 1)
        if len(raw) > MAX_REGISTRY_BYTES:
            raise ValueError(f"larger than {MAX_REGISTRY_BYTES:,} bytes")
        text = raw.decode("utf-8")
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8" if isinstance(exc, UnicodeError) else exc
        raise Invalid(
            [f"{path}: cannot read it ({why}); regenerate it with `make generate` or `gkr registry fetch`"]
        ) from None
    return Located(contract.loads(text, str(path)), path, how)


def unpack(data: Mapping[str, str], binary: Mapping[str, str], where: str) -> tuple[str, dict[str, bytes]]:
    """(registry.json's text, schema file name -> bytes) from a ConfigMap's data and base64 binaryData.

    Checked before anything is written: the registry parses (this gkr reads its schema), every
    schema is a gzip'ed JSON object under a plain file name, unpacked within MAX_SCHEMA_BYTES.
    """
    # `gkr registry fetch` only: every other command starts without them.
    import base64
    import binascii
    import zlib

    text = data.get(contract.FILE)
    if not isinstance(text, str):
        raise Invalid([f"{where}: no {contract.FILE} in its data; the cluster's generated config is incomplete"])
    contract.loads(text, f"{where}: {contract.FILE}")
    schemas: dict[str, bytes] = {}
    for key, encoded in sorted(binary.items()):
        name = key.removesuffix(GZ)
        if not key.endswith(GZ) or not SCHEMA_FILE.fullmatch(name):
            raise Invalid([f"{where}: binaryData {key!r} is not <schema file>.json{GZ}; refusing the ConfigMap"])
        try:
            packed = base64.b64decode(encoded, validate=True)
            unzip = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip; bounded, unlike gzip.decompress
            raw = unzip.decompress(packed, MAX_SCHEMA_BYTES + 1)
            if len(raw) > MAX_SCHEMA_BYTES or not unzip.eof:
                raise ValueError(f"larger than {MAX_SCHEMA_BYTES:,} bytes unpacked, or truncated")
            if not isinstance(json.loads(raw), dict):
                raise ValueError("not a JSON object")
        except (binascii.Error, zlib.error, ValueError, RecursionError) as exc:
            raise Invalid(
                [f"{where}: binaryData {key}: not a gzip'ed JSON schema ({exc}); refusing the ConfigMap"]
            ) from None
        schemas[name] = raw
    return text, schemas


def store(text: str, schemas: Mapping[str, bytes], target: Path | None = None) -> Path:
    """Write registry.json and schemas/ into `target` (default: fetched_dir()) whole or not at all.

    Everything is written into a new folder beside it first, which then takes its place: a reader
    sees the old registry or the new one, never half of one.
    """
    import shutil  # `gkr registry fetch` only, as above
    import tempfile

    target = target or fetched_dir()
    target.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}-old-", dir=target.parent)) / target.name
    try:
        (fresh / contract.SCHEMAS_DIR).mkdir()
        for name, raw in schemas.items():
            (fresh / contract.SCHEMAS_DIR / name).write_bytes(raw)
        (fresh / contract.FILE).write_text(text, encoding="utf-8")
        if target.exists():
            target.replace(old)
        fresh.replace(target)
    except BaseException:
        if old.exists() and not target.exists():
            old.replace(target)  # put the previous copy back
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(old.parent, ignore_errors=True)
    return target / contract.FILE


def source_context(
    region: str | None, context: str | None, known: Registry | None, contexts: list[str], current: str | None
) -> str:
    """The kubeconfig context `gkr registry fetch` reads from: --context, else the region's, else the current one.

    A region's context is the one a registry already at hand names (GKE's gke_<project>_<region>_<cluster>),
    else the only GKE context of the kubeconfig for that region. Invalid, with the fix, when it is not there.
    """
    if region and context:
        raise Invalid(["pass --region or --context, not both"])
    regions = {r.name: r for r in known.regions} if known is not None else {}
    fix = credentials(region, known)
    if known is not None and region in regions:
        chosen = known.context(regions[region])
    elif region:
        matches = [c for c in contexts if c.startswith("gke_") and c.split("_")[2:3] == [region]]
        if len(matches) > 1:
            raise Invalid([f"{len(matches)} GKE contexts for {region} in the kubeconfig; pass --context, one of "
                           f"{', '.join(matches)}"])  # fmt: skip
        if not matches:
            raise Invalid([f"no GKE context for {region} in the kubeconfig; run: {fix}"])
        chosen = matches[0]
    elif context:
        chosen = context
    elif current is None:
        raise Invalid(["the kubeconfig has no current context; pass --region or --context"])
    else:
        chosen = current
    if chosen not in contexts:
        how = f"run: {fix}" if region else f"use one of {', '.join(contexts)}" if contexts else "it has none"
        raise Invalid([f"no context {chosen} in the kubeconfig; {how}"])
    return chosen


def fetch_failed(why: str) -> str:
    """Why a cluster did not hand over its registry ConfigMap (kube.unreachable's words), and what to check."""
    hints = {
        "HTTP 404": "not found: is the cluster synced with the fleet's generated config?",
        "forbidden": "forbidden: your account needs get on that ConfigMap (the fleet's generated RBAC grants it)",
    }
    return hints.get(why, why)


def credentials(region: str | None, known: Registry | None) -> str:
    """The command that writes a region's kubeconfig context: exact when a registry at hand knows the region."""
    found = next((r for r in known.regions if r.name == region), None) if known is not None else None
    if known is not None and found is not None:
        return known.credentials_command(found)
    return f"gcloud container clusters get-credentials CLUSTER --region {region or 'REGION'} --project PROJECT --dns-endpoint"


def refuse_fleet(args: list[str]) -> None:
    """--fleet (gone with the registry) is refused in one line (Invalid) wherever it appears before `--`."""
    for i, arg in enumerate(args[: args.index("--") if "--" in args else len(args)]):
        if arg == "--fleet" or arg.startswith("--fleet="):
            value = arg.partition("=")[2] or (args[i + 1] if i + 1 < len(args) else "fleet.yaml")
            generated = Path(value).expanduser().parent / contract.GENERATED_DIR
            raise Invalid([f"--fleet is replaced by --registry: pass --registry {generated} (the folder `make "
                           "generate` writes beside fleet.yaml), or run `gkr registry fetch`"])  # fmt: skip
