"""The fleet's own images: what a new digest brings, and when a pin by version alone is accepted.

The images workflow (.github/workflows/images.yaml) pushes warden and trainer by digest and
proposes each digest in fleet.yaml. Such a pull request changes nothing in this repository but
fleet.yaml and what is generated from it, so its review lists, for a code owner, what changed
in the image's sources since the commit that set the previous pin: the component's folder and
every path its Dockerfile copies, read from git history of the repository under review as data
(never by running its code). `platform/warden/` and `platform/trainer/` then have an owner at
the point where their code starts to run in the clusters.

An image of the fleet's registry pinned by version only is accepted while that registry refuses
to move or delete a tag (Artifact Registry immutable tags: the repository's
docker_config.immutable_tags, https://cloud.google.com/artifact-registry/docs/docker/names#versions);
it is reported as not yet pinned by digest. With mutable tags it is refused: the tag a cluster
pulls could name other bytes tomorrow.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterable
from dataclasses import replace

from review.kubernetes import Clusters
from review.terraform import Stacks
from review.versions import VersionChange, digest_moved, image_pins, join_image

Git = Callable[..., str]  # git(*args) in the repository under review: its stdout (raises ReviewError)
SPEC = "fleet.yaml"  # where every image pin is written (DESIGN.md: one source of truth)
SHOWN = 12  # changed paths named in one line; the rest counted


def registries(stacks: Stacks) -> dict[str, bool]:
    """`LOCATION-docker.pkg.dev/PROJECT/REPOSITORY` of each Docker repository the stacks declare -> whether
    its tags are immutable (docker_config.immutable_tags, google provider artifact_registry_repository)."""
    out: dict[str, bool] = {}
    for stack in stacks.values():
        providers = (stack.get("provider") or {}).get("google") or [{}]
        default_project = providers[0].get("project") if isinstance(providers, list) and providers else None
        for repository in (stack.get("resource", {}).get("google_artifact_registry_repository") or {}).values():
            if str(repository.get("format", "")).upper() != "DOCKER":
                continue
            project = repository.get("project") or default_project
            url = f"{repository.get('location')}-docker.pkg.dev/{project}/{repository.get('repository_id')}"
            config = repository.get("docker_config") or {}
            config = config[0] if isinstance(config, list) and config else config
            out[url] = isinstance(config, dict) and config.get("immutable_tags") is True
    return out


def registry_of(repository: str, known: Iterable[str]) -> str | None:
    """The fleet registry `repository` (an image's `registry/path/name`) lies in, if any."""
    return next((r for r in sorted(known) if repository.startswith(f"{r}/")), None)


def version_only(clusters: Clusters, known: Iterable[str]) -> dict[str, tuple[str, str]]:
    """Image references of the fleet's registries without a digest -> (repository, its registry)."""
    known = list(known)
    out: dict[str, tuple[str, str]] = {}
    for objects in clusters.values():
        for repository, pins in image_pins(objects).items():
            registry = registry_of(repository, known)
            if registry is not None:
                out |= {join_image(repository, pin): (repository, registry) for pin in pins if "@" not in pin}
    return dict(sorted(out.items()))


def dockerfile_sources(text: str) -> list[str]:
    """Paths a Dockerfile copies from the build context (COPY and ADD, not `--from` a stage), normalized
    to repository paths without `./` or a trailing `/` ("" for the whole context)."""
    sources: list[str] = []
    logical = text.replace("\\\n", " ").splitlines()
    for line in logical:
        words = line.strip().split(None, 1)
        if len(words) < 2 or words[0].upper() not in ("COPY", "ADD"):
            continue
        rest, flags = words[1].strip(), []
        while rest.startswith("--"):  # --from=stage, --chown=..., --link: before the operands
            flag, _, rest = rest.partition(" ")
            flags.append(flag)
            rest = rest.strip()
        if any(flag.startswith("--from") for flag in flags):
            continue  # from another stage, not from the repository
        try:
            operands = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
        except ValueError:
            continue  # not a line docker would build either
        if not isinstance(operands, list):
            continue
        for source in operands[:-1]:  # the last operand is the destination
            path = str(source).removeprefix("./").rstrip("/")
            sources.append("" if path == "." else path)
    return sources


def _within(path: str, sources: Iterable[str]) -> bool:
    return any(s in ("", path) or path.startswith(f"{s}/") for s in sources)


def _show(git: Git, commit: str, path: str) -> str | None:
    if not git("ls-tree", "--name-only", commit, "--", path):
        return None
    return git("show", f"{commit}:{path}")


def changed_paths_note(
    change: VersionChange,
    old_pins: Iterable[str],
    base: str,
    git: Git,
    changed_since: Callable[[str], list[str]],
    head_dockerfile: str | None,
) -> str:
    """What changed in the image's sources since the commit (in BASE's history) that set the previous pin.

    `changed_since(commit)`: the files HEAD differs in from `commit` (review.changed_files); the sources are
    `platform/<image name>/` and what BASE's and HEAD's Dockerfile there copy (a Dockerfile that drops a
    COPY is itself a change under the component's folder).
    """
    name = change.repository.rsplit("/", 1)[-1]
    dockerfile = f"platform/{name}/Dockerfile"
    texts = [t for t in (head_dockerfile, _show(git, base, dockerfile)) if t is not None]
    if not texts:
        return f"no {dockerfile} on either side: what the image is built from is unknown"
    sources = sorted({f"platform/{name}", *(s for t in texts for s in dockerfile_sources(t))})
    setters = []
    for pin in old_pins:
        reference = join_image(change.repository, pin)
        setter = git("log", "-1", "--format=%H", f"-S{reference}", base, "--", SPEC)
        if not setter:
            return f"the commit that set {reference} is not in {SPEC}'s history: its changes since are unknown"
        setters.append(setter)
    # The oldest of the previous pins' commits: everything any cluster has not run yet.
    since = min(setters, key=lambda c: int(git("rev-list", "--count", c) or 0)) if setters else base
    paths = [p for p in changed_since(since) if _within(p, sources)]
    where = f"{', '.join(s or '.' for s in sources)} since {since[:10]}, which set the previous pin"
    if not paths:
        return f"nothing changed in {where}: the same sources built again"
    shown = ", ".join(paths[:SHOWN]) + (f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else "")
    return f"changed in {where}: {shown}"


def project_changes(
    changes: list[VersionChange],
    before: Clusters,
    after: Clusters,
    known: Iterable[str],
    note: Callable[[VersionChange, list[str]], str],
) -> list[VersionChange]:
    """`changes` with each new digest of a fleet-registry image annotated by `note(change, its previous pins)`."""

    def pins(clusters: Clusters) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for objects in clusters.values():
            for repository, found in image_pins(objects).items():
                out.setdefault(repository, set()).update(found)
        return out

    old, new = pins(before), pins(after)
    known = list(known)
    return [
        replace(c, note=f"{c.note}; {note(c, sorted(old.get(c.repository, set())))}")
        if c.repository
        and registry_of(c.repository, known) is not None
        and digest_moved(old.get(c.repository, set()), new.get(c.repository, set()))
        else c
        for c in changes
    ]
