"""From a job file and flags to validated manifests; nothing is applied here."""

from __future__ import annotations

import json
from typing import Any

from contract.problem import Invalid, Problem
from gkr import keys
from gkr.flags import Flags
from gkr.inputs import Origins, read_job
from gkr.registry import Located
from gkr.render import render
from gkr.resolve import resolve
from gkr.resolved import Resolved
from gkr.spec import JobSpec
from gkr.validate import schema_problems

# An object over 1.5 MiB never lands: etcd refuses larger requests (its --max-request-bytes
# default; etcd docs, dev-guide/limit) and the API server takes bodies up to 3 MiB, twice that,
# to leave room for JSON (kubernetes/kubernetes#105863). gkr applies JSON: it measures that.
MAX_OBJECT_BYTES = 1536 * 1024

# Every character str.splitlines() and terminals break a line at, written as its escape.
_LINE_BREAKS = {ord(c): repr(c)[1:-1] for c in "\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}


def one_line(lines: list[str]) -> list[str]:
    """Keys and values from the input may hold line breaks: keep each problem on its line."""
    return [line.translate(_LINE_BREAKS) for line in lines]


def preflight_job(user: str, pods: int, gpus_per_pod: int) -> dict[str, Any]:
    """`gkr preflight`: an indexed Job that runs only the checks, named after the user."""
    return {
        "name": f"preflight-{user.lower()[:20]}".rstrip("-"),
        "kind": "job",
        "pods": pods,
        "gpus_per_pod": gpus_per_pod,
        "command": ["preflight", "run", "--check", "compute"],
    }


def prepare(
    file: str | None,
    flags: Flags,
    found: Located,
    default_region: str | None,
    default_team: str | None = None,
) -> tuple[Resolved, list[dict[str, Any]]]:
    """Resolve, check and render; Invalid with a line for every problem found.

    The user config's `default_team` and `default_region` fill what neither flags nor file say;
    the team only without a job file (a file names its own team, so it means the same for anyone).
    """
    spec, origins = read(file, flags, default_team)
    return prepare_job(spec, origins, found, default_region)


def read(file: str | None, flags: Flags, default_team: str | None = None) -> tuple[JobSpec, Origins]:
    """The job from file and flags (the user config's team only without a file); Invalid, one line each."""
    if file is None and default_team and "team" not in flags:
        flags = {**flags, "team": (keys.flags(JobSpec)["team"], default_team)}
    try:
        return read_job(file, flags)
    except Invalid as exc:
        raise Invalid(one_line(list(exc.lines))) from None


def prepare_job(
    spec: JobSpec, origins: Origins, found: Located, default_region: str | None
) -> tuple[Resolved, list[dict[str, Any]]]:
    """One job in one region: resolve, render, check."""
    resolved, problems = resolve(spec, found.registry, default_region)
    if problems or resolved is None:
        raise Invalid(one_line([origins.line(p) for p in problems]))
    objects = render(resolved)
    check_rendered(resolved, objects, found, origins)
    return resolved, objects


def check_rendered(resolved: Resolved, objects: list[dict[str, Any]], found: Located, origins: Origins) -> None:
    """What the cluster would refuse of rendered objects: their size, and the pinned schemas; Invalid."""
    oversized = _oversized(resolved, objects)
    if oversized:
        field, message = oversized
        raise Invalid(one_line([origins.line(Problem(path=(field,), message=message))]))
    invalid = [line for obj in objects for line in schema_problems(obj, found.schemas)]
    if invalid:
        raise Invalid(one_line([f"rendered manifest: {line}" for line in invalid]))


def _oversized(r: Resolved, objects: list[dict[str, Any]]) -> tuple[str, str] | None:
    """(the job key to blame, the problem) for the first object too large to store, or None."""
    for obj in objects:
        size = len(json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass"))
        if size > MAX_OBJECT_BYTES:
            env = sum(len(k) + len(v) for k, v in r.spec.env.items())
            field = "env" if env > sum(len(c) for c in r.command) else "command"
            return field, (
                f"the rendered {obj['kind']} is {size:,} bytes; the cluster stores at most {MAX_OBJECT_BYTES:,} "
                "(etcd's 1.5 MiB request limit; the API server takes 3 MiB), so shorten the "
                f"{field} or ship large data in the image or a dataset bucket"
            )
    return None
