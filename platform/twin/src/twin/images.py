"""Every Dockerfile of the project, built here as a CPU twin: the same Dockerfile, its base a build argument.

No image registry is reachable from this machine, so each upstream base image has a stand-in built from a
Debian bookworm root file system made with debootstrap and imported into podman (`STAND_INS`). Each
project Dockerfile declares its base as `ARG BASE_IMAGE=<upstream>` before its first FROM; the twin passes
the stand-in instead and mounts the machine's wheel folder (PyTorch's CPU build) at /wheels. Everything
else is the Dockerfile as shipped. podman caches layers, so an unchanged image is not rebuilt.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from twin import engine
from twin.engine import TwinError

REGISTRY = "localhost/meridian-twin"
DEBIAN = f"{REGISTRY}/debian:bookworm"
BASES = Path(__file__).parent / "bases"
WHEELS = "/wheels"
CA = "/etc/twin-ca.crt"  # the machine's CA bundle in every build: pip here reaches PyPI through a TLS proxy
_BASE_ARG = re.compile(r"^ARG BASE_IMAGE=(\S+)\s*$", re.MULTILINE)
_TORCH = re.compile(r"^(torch|networkx)==\S+", re.MULTILINE)
_ENTRY = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9._]*)==", re.MULTILINE)


@dataclass(frozen=True)
class StandIn:
    """A twin base image in place of an upstream one: built from `containerfile` on top of `parent`."""

    image: str
    containerfile: str
    parent: str = DEBIAN


# By the upstream repository (the tag and digest are the Dockerfile's; the stand-in does not track them).
STAND_INS = {
    "nvidia/cuda": StandIn(f"{REGISTRY}/cuda-base:twin", "cuda.Containerfile"),
    "python": StandIn(f"{REGISTRY}/python-base:twin", "python.Containerfile"),
    "vllm/vllm-openai": StandIn(f"{REGISTRY}/vllm-base:twin", "vllm.Containerfile", f"{REGISTRY}/python-base:twin"),
}


@dataclass(frozen=True)
class Dockerfile:
    path: Path  # relative to the repository root
    name: str  # the image's name: the component for `Dockerfile`, the suffix for `Dockerfile.<name>`
    base: str  # the upstream base image the Dockerfile declares

    @property
    def image(self) -> str:
        return f"{REGISTRY}/{self.name}:twin"

    @property
    def stand_in(self) -> StandIn:
        repository = self.base.split("@")[0].rsplit(":", 1)[0]
        if repository not in STAND_INS:
            raise TwinError(
                f"{self.path}: base image {self.base!r} has no stand-in in the twin; add one to twin.images.STAND_INS"
            )
        return STAND_INS[repository]


def dockerfiles(repo: Path) -> list[Dockerfile]:
    """Every Dockerfile under platform/, each with the base image it declares as `ARG BASE_IMAGE=...`."""
    found = []
    for path in sorted(repo.glob("platform/*/Dockerfile*")):
        match = _BASE_ARG.search(path.read_text())
        rel = path.relative_to(repo)
        if match is None:
            raise TwinError(f"{rel}: no `ARG BASE_IMAGE=<image>` before FROM; the twin builds it on a stand-in base")
        name = path.parent.name if path.name == "Dockerfile" else path.name.split(".", 1)[1]
        found.append(Dockerfile(rel, name, match.group(1)))
    return found


def image_name(reference: str, built: set[str]) -> str | None:
    """The twin image for a rendered image reference (`registry/path/trainer:tag@digest` → trainer), or None."""
    name = reference.split("@", maxsplit=1)[0].rsplit("/", 1)[-1].split(":", maxsplit=1)[0]
    return f"{REGISTRY}/{name}:twin" if name in built else None


def wheels_dir(environ: dict[str, str]) -> Path:
    """The machine's wheel folder (pip's find-links here): where PyTorch's CPU build lies."""
    for candidate in [*environ.get("PIP_FIND_LINKS", "").split(), "/opt/wheels"]:
        folder = Path(candidate.removeprefix("file://"))
        if folder.is_dir() and any(folder.glob("torch-*+cpu-*.whl")):
            return folder
    raise TwinError("twin: no folder with PyTorch's CPU wheel (torch-*+cpu-*.whl); set PIP_FIND_LINKS to one")


def ca_bundle(environ: dict[str, str]) -> Path:
    """The CA bundle pip trusts on this machine (PIP_CERT, else Debian's): the builds' pip trusts the same."""
    bundle = Path(environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt")
    if not bundle.is_file():
        raise TwinError(f"twin: no CA bundle at {bundle}; set PIP_CERT to the bundle pip uses here")
    return bundle


def debian(log: Callable[[str], None]) -> None:
    """Debian bookworm from debootstrap, imported as DEBIAN (once: the image is kept)."""
    if engine.image_exists(DEBIAN):
        return
    engine.require_tools("debootstrap")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(dir=engine.state_dir()) as tmp:
        root = Path(tmp) / "rootfs"
        proc = subprocess.run(
            ["debootstrap", "--variant=minbase", "bookworm", str(root), "http://deb.debian.org/debian"],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise TwinError(f"debootstrap: exit {proc.returncode}: {proc.stdout.strip().splitlines()[-1:]}")
        tar = subprocess.run(["tar", "-C", str(root), "-c", "."], capture_output=True, check=True)
        engine.run(
            ["import", "--message", "meridian twin: debootstrap bookworm minbase", "-", DEBIAN], stdin=tar.stdout
        )
    log(f"base {DEBIAN}: debootstrap and import in {time.monotonic() - start:.0f} s")


def _write_if_changed(path: Path, text: str) -> None:
    """Unchanged files keep their times, so podman's layer cache knows the COPY it built from them."""
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)


def _stand_in_context(repo: Path, stand_in: StandIn, folder: Path) -> None:
    """The stand-in's build context: its Containerfile and, for vLLM's, the pins it installs."""
    folder.mkdir(parents=True, exist_ok=True)
    _write_if_changed(folder / "Containerfile", (BASES / stand_in.containerfile).read_text())
    if stand_in.containerfile == "vllm.Containerfile":
        wanted = {line.strip() for line in (BASES / "vllm-base.txt").read_text().splitlines()}
        lock = (repo / "requirements/dev.lock").read_text()
        starts = [(m.start(), m.group(1).lower()) for m in _ENTRY.finditer(lock)] + [(len(lock), "")]
        entries = [lock[a:b] for (a, name), (b, _) in itertools.pairwise(starts) if name in wanted]
        _write_if_changed(folder / "vllm-base.lock", "".join(entries))
        pins = [m.group(0) for m in _TORCH.finditer((repo / "requirements/torch.txt").read_text())]
        if len(pins) != 2:
            raise TwinError("requirements/torch.txt: the twin's vLLM stand-in needs its torch and networkx pins")
        _write_if_changed(folder / "vllm-torch.txt", "\n".join(pins) + "\n")


def build_stand_in(repo: Path, stand_in: StandIn, wheels: Path, log: Callable[[str], None]) -> None:
    if stand_in.parent != DEBIAN:
        parent = next(s for s in STAND_INS.values() if s.image == stand_in.parent)
        build_stand_in(repo, parent, wheels, log)
    context = engine.state_dir() / "contexts" / stand_in.containerfile.split(".")[0]
    _stand_in_context(repo, stand_in, context)
    _build(context, context / "Containerfile", stand_in.image, {"PARENT": stand_in.parent}, wheels, log)


def _build(context: Path, file: Path, tag: str, args: dict[str, str], wheels: Path, log: Callable[[str], None]) -> None:
    start = time.monotonic()
    argv = ["build", "--network", "host", "--layers", "-f", str(file), "-t", tag, "-v", f"{wheels}:{WHEELS}:ro"]
    argv += ["-v", f"{ca_bundle(dict(os.environ))}:{CA}:ro"]
    for key, value in args.items():
        argv += ["--build-arg", f"{key}={value}"]
    proc = engine.run([*argv, str(context)], check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise TwinError(f"podman build {tag}: exit {proc.returncode}\n{tail}")
    log(f"image {tag}: {time.monotonic() - start:.0f} s")


def build_all(repo: Path, log: Callable[[str], None], only: set[str] | None = None) -> list[Dockerfile]:
    """The Debian base, each stand-in a Dockerfile needs, then each Dockerfile (or those named in `only`)."""
    engine.require_tools("podman", "runc")
    engine.state_dir().mkdir(parents=True, exist_ok=True)
    wheels = wheels_dir(dict(os.environ))
    files = [d for d in dockerfiles(repo) if only is None or d.name in only]
    debian(log)
    for stand_in in {d.stand_in for d in files}:
        build_stand_in(repo, stand_in, wheels, log)
    for d in files:
        _build(repo, repo / d.path, d.image, {"BASE_IMAGE": d.stand_in.image}, wheels, log)
    return files
