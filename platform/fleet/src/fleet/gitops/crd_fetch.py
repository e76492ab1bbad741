"""The pinned CRDs validation reads, on this machine: checked where provided, else downloaded and checked.

Validation (fleet.gitops.validate.CrdSchemas) reads each pinned folder (`kuberay/v1.7.0`, ...) from the
first CRD root that has it: $MERIDIAN_CRDS, ../shared/crds, then the cache `.cache/crds`. `survey` looks
the same way, so what it checks is what validation will read: a folder someone provided must hold every
locked file, byte for byte; a folder nobody provided is the cache's to fill. `download` checks every body
against the lock before `write` puts any on disk, and `write` puts each beside its target and renames it:
a refused or failed download leaves the cache as it was, never a file cut short.
"""

from __future__ import annotations

import http.client
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

from contract.problem import Invalid
from fleet.gitops.crd_lock import LOCK, CrdLock, LockedCrd, sha256

# The largest pinned CRD is 1.4 MB; a server that sends more is not sending one.
MAX_BYTES = 16 << 20
TIMEOUT_S = 30.0
NOT_HERE = (
    "the pinned CRDs are not on this machine: run `make setup` where raw.githubusercontent.com is reachable, "
    f"or put them in ../shared/crds or a folder named by $MERIDIAN_CRDS ({LOCK} lists each file, URL and sha256)"
)

Opener = Callable[[str, float], IO[bytes]]


@dataclass(frozen=True, kw_only=True)
class Survey:
    provided: dict[str, Path]  # folder -> the root that provides it, its files checked
    cached: list[LockedCrd]  # already in the cache, checked
    fetch: list[LockedCrd]  # to download into the cache
    wrong: list[str]  # a provided file that is absent or not the pinned one: one line each


def survey(lock: CrdLock, roots: list[Path], cache: Path) -> Survey:
    """What `roots` (in validation's order, `cache` among them) hold of `lock`, and what the cache lacks."""
    provided: dict[str, Path] = {}
    cached: list[LockedCrd] = []
    fetch: list[LockedCrd] = []
    wrong: list[str] = []
    for crd in lock.files:
        root = next((r for r in roots if (r / crd.folder).is_dir()), cache)
        file = root / crd.path
        good = file.is_file() and sha256(file.read_bytes()) == crd.sha256
        if root == cache:
            (cached if good else fetch).append(crd)
        elif good:
            provided[crd.folder] = root
        elif not file.is_file():
            wrong.append(f"{file}: absent from a folder of pinned CRDs that validation reads; {_provided_fix(crd)}")
        else:
            wrong.append(f"{file}: sha256 {sha256(file.read_bytes())}, {LOCK} pins {crd.sha256}; {_provided_fix(crd)}")
    return Survey(provided=provided, cached=cached, fetch=fetch, wrong=wrong)


def _provided_fix(crd: LockedCrd) -> str:
    return f"put the pinned file there ({crd.url}) or remove the folder {crd.folder} so `make setup` downloads it"


def _open(url: str, timeout: float) -> IO[bytes]:
    response: IO[bytes] = urllib.request.urlopen(url, timeout=timeout)
    return response


def download(files: list[LockedCrd], base_url: str | None = None, opener: Opener = _open) -> dict[str, bytes]:
    """{path: body} for `files`, each body checked against its sha256; Invalid (one line) at the first failure.

    base_url: the tests' local server in place of upstream's scheme and host (the path is kept); every byte
    is still checked against the lock, so it can serve nothing but the pinned files.
    """
    bodies = {}
    for crd in files:
        url = crd.url if base_url is None else base_url.rstrip("/") + urlsplit(crd.url).path
        try:
            with opener(url, TIMEOUT_S) as response:
                body = response.read(MAX_BYTES + 1)
        except (OSError, ValueError, http.client.HTTPException) as exc:  # URLError, HTTPError, timeouts: OSError
            raise Invalid([f"{crd.path}: cannot download {url} ({_reason(exc)}); {NOT_HERE}"]) from None
        if len(body) > MAX_BYTES:
            raise Invalid([f"{url}: more than {MAX_BYTES} bytes, not a CRD; nothing written"])
        if (got := sha256(body)) != crd.sha256:
            raise Invalid(
                [
                    f"{url}: sha256 {got}, {LOCK} pins {crd.sha256} for {crd.path}: not the pinned file (changed "
                    "upstream or damaged on the way); nothing written"
                ]
            )
        bodies[crd.path] = body
    return bodies


def _reason(exc: Exception) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    reason = getattr(exc, "reason", None) or exc  # URLError wraps the socket's error
    return " ".join(str(reason).split())[:200] or type(exc).__name__


def write(cache: Path, bodies: dict[str, bytes]) -> None:
    """Each body into the cache, whole or not at all: written beside its target, then renamed over it."""
    for path, body in bodies.items():
        target = cache / path
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.partial")
        partial.write_bytes(body)
        os.replace(partial, target)


def ensure(lock: CrdLock, roots: list[Path], cache: Path, base_url: str | None = None) -> Survey:
    """Every locked CRD where validation will read it, checked: what `survey` found, after the cache's share is
    downloaded and written. Invalid (a line per wrong provided file, or the first failed download) with nothing
    written."""
    found = survey(lock, roots, cache)
    if found.wrong:
        raise Invalid(found.wrong)
    write(cache, download(found.fetch, base_url))
    return found
