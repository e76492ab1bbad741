"""`gkr submit --workdir DIR`: the researcher's own code in a RayJob without an image rebuild.

The folder is packed into a zip (deterministic: sorted names, fixed timestamps, so the same files
give the same bytes), uploaded once under the team's folder of the region's checkpoint bucket,
content-addressed (gs://<bucket>/<the team prefix>workdirs/<sha256>.zip, skipped when present), and
the RayJob's runtimeEnvYAML points `working_dir` at it, as `kubectl ray job submit --working-dir`
and Ray job submission do. Ray (docs, "Handling dependencies", remote URIs) wants a remote
working_dir to be a .zip holding one top-level directory, whose contents become the job's working
directory. Files matched by a .gitignore (in the folder or any folder below, each relative to its
own folder) or by the folder's .gkrignore (same syntax) are left out, and so is .git/.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.names import team_prefix
from contract.problem import Invalid

# Ray refuses a working_dir package above 500 MiB (GCS_STORAGE_MAX_SIZE, Ray docs "Handling
# dependencies": "The total size of the directory should be no more than 500 MiB"); every Ray node
# downloads and unpacks it before the job starts. Data belongs in a dataset bucket, not here.
LIMIT_BYTES = 500 * 1024 * 1024
TOP = "workdir"  # the zip's single top-level directory
IGNORE_FILES = (".gitignore",)  # honoured in every folder
GKRIGNORE = ".gkrignore"  # honoured in the top folder
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest a zip can say: no mtime in the hash


@dataclass(frozen=True)
class Package:
    root: Path
    files: tuple[str, ...]  # paths relative to root, sorted
    size: int  # bytes of the files
    zip_path: Path  # a temporary file; the caller removes it
    zip_size: int
    sha256: str


def uri(bucket: str, team: str, sha256: str) -> str:
    return f"gs://{bucket}/{team_prefix(team)}workdirs/{sha256}.zip"


def _spec(path: Path) -> Any:
    import pathspec

    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        raise Invalid([f"{path}: cannot read it ({exc.strerror})"]) from None
    return pathspec.GitIgnoreSpec.from_lines(lines)


def collect(root: Path) -> list[str]:
    """The files to pack, relative to root, with the ignore rules applied (sorted)."""
    if not root.is_dir():
        raise Invalid([f"--workdir {root}: not a folder"])
    specs: list[tuple[str, Any]] = []  # (folder relative to root, "" for root; its rules)
    if (root / GKRIGNORE).is_file():
        specs.append(("", _spec(root / GKRIGNORE)))
    found: list[str] = []

    def ignored(relative: str, is_dir: bool) -> bool:
        for folder, spec in specs:
            if folder and not relative.startswith(folder + "/"):
                continue
            inner = relative[len(folder) + 1 :] if folder else relative
            if spec.match_file(inner + "/" if is_dir else inner):
                return True
        return False

    for current, dirs, files in os.walk(root):  # symlinked folders are not followed: no loops, no escapes
        here = Path(current)
        prefix = here.relative_to(root).as_posix()
        prefix = "" if prefix == "." else prefix
        for name in IGNORE_FILES:
            if (here / name).is_file():
                specs.append((prefix, _spec(here / name)))
        joined = [(f"{prefix}/{d}" if prefix else d, d) for d in dirs]
        dirs[:] = sorted(d for rel, d in joined if d != ".git" and not ignored(rel, True))
        for name in files:
            relative = f"{prefix}/{name}" if prefix else name
            if (here / name).is_file() and not ignored(relative, False):
                found.append(relative)
    return sorted(found)


def pack(root: Path, limit: int = LIMIT_BYTES) -> Package:
    """Zip the folder (deterministically) into a temporary file; Invalid above `limit` bytes of files."""
    files = collect(root)
    if not files:
        raise Invalid([f"--workdir {root}: no files to pack (all ignored, or the folder is empty)"])
    size = sum((root / f).stat().st_size for f in files)
    if size > limit:
        biggest = max(files, key=lambda f: (root / f).stat().st_size)
        raise Invalid(
            [
                f"--workdir {root}: {size / 2**20:,.1f} MiB in {len(files):,} files, above the {limit / 2**20:,.0f} "
                f"MiB a Ray working_dir may hold (every node downloads it); the largest is {biggest}: add what the job "
                f"does not need to {GKRIGNORE}, and read data from a dataset bucket or /checkpoints"
            ]
        )
    handle, name = tempfile.mkstemp(prefix="gkr-workdir-", suffix=".zip")
    os.close(handle)
    path = Path(name)
    try:
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            for relative in files:
                source = root / relative
                info = zipfile.ZipInfo(f"{TOP}/{relative}", ZIP_TIME)
                mode = 0o755 if source.stat().st_mode & stat.S_IXUSR else 0o644  # keep scripts runnable
                info.external_attr = (stat.S_IFREG | mode) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                with source.open("rb") as src, archive.open(info, "w") as dst:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)
        digest = hashlib.sha256()
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return Package(root, tuple(files), size, path, path.stat().st_size, digest.hexdigest())


def _size(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB" if n >= 2**20 else f"{n / 1024:,.1f} KiB"


def describe(package: Package, target: str) -> str:
    return (
        f"workdir {package.root}: {len(package.files):,} files, {_size(package.size)} "
        f"(zip {_size(package.zip_size)}) -> {target}"
    )


def runtime_env(target: str) -> str:
    """The RayJob's runtimeEnvYAML (a YAML string in the CRD)."""
    return f"working_dir: {target}\n"


def attach(objects: list[dict[str, Any]], target: str) -> None:
    """Point every RayJob's runtime environment at the uploaded package."""
    for obj in objects:
        if obj.get("kind") == "RayJob":
            obj["spec"]["runtimeEnvYAML"] = runtime_env(target)


def prepare(folder: Path, kind: str, bucket: str, team: str, objects: list[dict[str, Any]]) -> tuple[Package, str]:
    """Pack the folder and point the job's RayJob at where it will be uploaded: (package, its URI).

    Invalid when the job has no Ray runtime environment or the folder cannot be packed.
    """
    if kind != "rayjob":
        raise Invalid([f"--workdir: a {kind} has no Ray job runtime environment; use --kind rayjob"])
    package = pack(folder)
    target = uri(bucket, team, package.sha256)
    attach(objects, target)
    return package, target


def upload(package: Package, target: str, project: str | None = None) -> bool:
    """Upload unless the object is there already (its name is its content's hash); True when uploaded.

    Uses Google's application default credentials; $STORAGE_EMULATOR_HOST (the client library's own
    variable) points it at an emulator, anonymously.
    """
    from google.api_core.exceptions import PreconditionFailed
    from google.cloud import storage  # type: ignore[import-untyped]

    bucket_name, _, blob_name = target.removeprefix("gs://").partition("/")
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        client = storage.Client(project=project or "gkr", credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    else:
        client = storage.Client(project=project)
    blob = client.bucket(bucket_name).blob(blob_name)
    if blob.exists():
        return False
    try:
        # Create-only: two submits of the same code at once write it once.
        blob.upload_from_filename(str(package.zip_path), content_type="application/zip", if_generation_match=0)
    except PreconditionFailed:
        return False
    return True
