"""Write the hash-checked lock of one container image from requirements/dev.lock.

An image installs only what it needs, at exactly the versions and hashes `make test` tested: the
closure of its roots' dependencies (and of the meridian-* components they depend on), cut out of
dev.lock, less what its base image already carries (`Image.carried`: neither locked nor followed).
The dependency graph is read from the components' pyprojects and the installed distributions'
metadata in .venv.

    python scripts/image_lock.py warden            # writes requirements/warden.lock
    python scripts/image_lock.py generator --check # exit 1 if the committed lock is stale
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent
DEV_LOCK = REPO / "requirements/dev.lock"
TORCH_TXT = REPO / "requirements/torch.txt"
# The images run Linux on x86-64 with the same Python minor as .venv.
ENVIRONMENT = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64", "extra": ""}
_ENTRY = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9._]*)==", re.MULTILINE)


@dataclass(frozen=True)
class Image:
    dockerfile: str  # from the repository root; it installs requirements/<name>.lock
    roots: tuple[str, ...]  # the distributions it runs; the lock is their closure
    carried: tuple[str, ...] = ()  # what its base image holds at the base's own versions: left to it


# The vLLM base image of the generator (platform/trainer/Dockerfile.generator): vLLM and what its kernels and
# model loading are built against, at vLLM's versions; fsspec comes with them (transformers -> huggingface-hub).
VLLM_IMAGE_CARRIES = ("vllm", "torch", "transformers", "tokenizers", "safetensors", "numpy", "pyyaml", "fsspec")
IMAGES = {
    "warden": Image("platform/warden/Dockerfile", ("meridian-warden",)),
    # The trainer image runs the trainer and preflight (its init container); Ray fetches a gkr --workdir
    # from gs:// through smart_open's GCS client. torch and torchft come from requirements/torch.txt.
    "trainer": Image(
        "platform/trainer/Dockerfile", ("meridian-trainer", "meridian-preflight", "smart-open", "google-cloud-storage")
    ),
    # The generator: telemetry and preflight (the trainer goes in with --no-deps: its training stack is not a
    # generator's) and Ray, the job's Ray cluster's version, with Ray's own dependencies at make test's versions.
    "generator": Image(
        "platform/trainer/Dockerfile.generator", ("meridian-preflight", "ray[default]"), carried=VLLM_IMAGE_CARRIES
    ),
}


def lock_entries(text: str) -> dict[str, str]:
    """Each package's block of a pip-compile lock (the pin, its hashes and `# via` lines), by canonical name."""
    starts = [(m.start(), canonicalize_name(m.group(1))) for m in _ENTRY.finditer(text)]
    ends = [start for start, _ in starts[1:]] + [len(text)]
    return {name: text[start:end].rstrip() + "\n" for (start, name), end in zip(starts, ends, strict=True)}


def _declared(name: str) -> list[str] | None:
    """A meridian-* component's dependencies from its pyproject: the source, newer than an installed copy's metadata."""
    for path in [*REPO.glob("platform/*/pyproject.toml")]:
        project = tomllib.loads(path.read_text())["project"]
        if canonicalize_name(project["name"]) == name:
            return list(project.get("dependencies", []))
    return None


def requires(name: str, extras: Iterable[str] = ("",)) -> list[tuple[str, frozenset[str]]]:
    """Runtime dependencies of a distribution with those `extras` ("" for the plain ones), markers evaluated
    for the image; each with the extras it is asked for (`ray[default]` brings the dashboard's)."""
    out: list[tuple[str, frozenset[str]]] = []
    for line in _declared(name) or metadata.requires(name) or []:
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate({**ENVIRONMENT, "extra": e}) for e in extras):
            out.append((canonicalize_name(req.name), frozenset(req.extras)))
    return out


def build_backend() -> set[str]:
    """What the components' pyprojects build with: the images install them with --no-build-isolation, so
    the backend must be in the image's environment at the tested version (a base image's ensurepip may
    carry a setuptools too old to build a wheel)."""
    needed: set[str] = set()
    for path in REPO.glob("platform/*/pyproject.toml"):
        for line in tomllib.loads(path.read_text()).get("build-system", {}).get("requires", []):
            needed.add(canonicalize_name(Requirement(line).name))
    return needed


def torch_pins() -> set[str]:
    """What requirements/torch.txt installs (not hash-locked: the CPU and CUDA builds differ)."""
    return {canonicalize_name(m.group(1)) for m in _ENTRY.finditer(TORCH_TXT.read_text())}


def closure(roots: Iterable[str], carried: Iterable[str] = ()) -> set[str]:
    """`roots` and everything they depend on, transitively, extras included; a carried distribution is
    neither taken nor followed."""
    taken: dict[str, set[str]] = {}  # distribution -> the extras already followed ("" for its plain dependencies)
    stop = {canonicalize_name(c) for c in carried}
    todo: list[tuple[str, frozenset[str]]] = []
    for root in roots:
        req = Requirement(root)
        todo.append((canonicalize_name(req.name), frozenset(req.extras)))
    while todo:
        name, extras = todo.pop()
        if name in stop:
            continue
        new = ({""} | set(extras)) - taken.setdefault(name, set())
        if new:
            taken[name] |= new
            todo.extend(requires(name, sorted(new)))
    return set(taken)


def image_lock(name: str, image: Image, dev_lock: str) -> str:
    entries = lock_entries(dev_lock)
    needed = (closure(image.roots, image.carried) | build_backend()) - torch_pins()
    ours = sorted(n for n in needed if n.startswith("meridian-"))
    others = sorted(canonicalize_name(r) for r in image.roots if not r.startswith("meridian-"))
    missing = sorted(n for n in needed - set(ours) if n not in entries)
    if missing:
        raise SystemExit(f"image_lock: {', '.join(missing)} not in requirements/dev.lock; run `make lock`")
    header = (
        f"# The {name} image's Python packages: the dependencies of {', '.join(ours)},\n"
        + (f"# and {', '.join(others)} with theirs,\n" if others else "")
        + "# and the components' build backend (they are installed with --no-build-isolation),\n"
        + "# cut out of requirements/dev.lock (same versions and hashes as `make test`).\n"
        + (f"# Left to the base image, at its versions: {', '.join(image.carried)}.\n" if image.carried else "")
        + f"# Generated by scripts/image_lock.py {name}; do not edit.\n"
    )
    return header + "".join(entries[n] for n in sorted(needed - set(ours)))


def image_of(name: str) -> Image | None:
    """A named image of IMAGES, or a component's own (platform/<name>, e.g. warden), or None."""
    if name in IMAGES:
        return IMAGES[name]
    if (REPO / "platform" / name / "pyproject.toml").is_file():
        return Image(f"platform/{name}/Dockerfile", (f"meridian-{name}",))
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("image", help=f"{', '.join(sorted(IMAGES))}, or a directory under platform/")
    parser.add_argument("--check", action="store_true", help="fail if the committed lock differs")
    args = parser.parse_args(argv)
    image = image_of(args.image)
    if image is None:
        print(
            f"image_lock: no image {args.image!r}; name one of {', '.join(sorted(IMAGES))} or a folder under platform/",
            file=sys.stderr,
        )
        return 2
    target = REPO / "requirements" / f"{args.image}.lock"
    text = image_lock(args.image, image, DEV_LOCK.read_text())
    if args.check:
        if not target.is_file() or target.read_text() != text:
            print(f"{target.relative_to(REPO)} is stale; run python scripts/image_lock.py {args.image}")
            return 1
        return 0
    target.write_text(text)
    print(f"wrote {target.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
