"""A stand-in for upstream's file server: the pinned CRDs from ../shared/crds at the lock's URL paths.

This machine reaches no GitHub, so the tests download from this server (scripts/fetch_crds.py's
MERIDIAN_CRDS_BASE_URL, crd_fetch's base_url). A test changes `files` to serve a damaged or a missing file.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from fleet.gitops import crd_lock
from fleet.gitops.validate import crd_roots
from tests.conftest import REPO
from tests.httpfake import JsonReplies, serving
from tests.ports import free_port


def committed_lock() -> crd_lock.CrdLock:
    return crd_lock.loads((REPO / crd_lock.LOCK).read_text(encoding="utf-8"), str(crd_lock.LOCK))


def shared_crds() -> Path:
    """../shared/crds, where the tests find it (skips where this checkout has none)."""
    found = next((root for root in crd_roots(REPO) if root.parent.name == "shared" and root.is_dir()), None)
    if found is None:
        pytest.skip("no ../shared/crds here: the pinned files the local server hands out")
    return found


@dataclass
class Upstream:
    files: dict[str, bytes]  # URL path -> body; absent: 404
    asked: list[str] = field(default_factory=list)  # URL paths, in the order asked
    base: str = ""

    def path_of(self, crd: crd_lock.LockedCrd) -> str:
        return urlsplit(crd.url).path


@contextmanager
def upstream() -> Iterator[Upstream]:
    """The committed lock's files, served at their URLs' paths from ../shared/crds."""
    shared = shared_crds()
    state = Upstream({urlsplit(c.url).path: (shared / c.path).read_bytes() for c in committed_lock().files})

    class Handler(JsonReplies):
        def do_GET(self) -> None:
            state.asked.append(self.path)
            body = state.files.get(self.path)
            if body is None:
                self.send_body(404, b"404: Not Found", "text/plain")
            else:
                self.send_body(200, body, "text/plain; charset=utf-8")

    with serving(Handler) as base:
        state.base = base
        yield state


def closed_port_url() -> str:
    """A local URL nothing listens on: a download from it is refused at once, as with no network."""
    return f"http://127.0.0.1:{free_port()}"
