"""Getting the pinned CRDs: downloaded from a local stand-in for upstream, each body checked before any is written."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from contract.problem import Invalid
from fleet.gitops import crd_fetch
from tests.gitops.upstream_crds import Upstream, closed_port_url, committed_lock, shared_crds, upstream

RAYJOBS = "kuberay/v1.7.0/ray.io_rayjobs.yaml"


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def served() -> Iterator[Upstream]:
    with upstream() as state:
        yield state


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "clone" / ".cache" / "crds"


def _roots(tmp_path: Path, cache: Path) -> list[Path]:
    """A clone's roots with nothing provided: no $MERIDIAN_CRDS, no ../shared/crds, then the cache."""
    return [tmp_path / "shared" / "crds", cache]


def test_an_empty_cache_is_filled_with_the_pinned_files(served: Upstream, cache: Path, tmp_path: Path) -> None:
    lock = committed_lock()
    found = crd_fetch.ensure(lock, _roots(tmp_path, cache), cache, served.base)
    assert (found.provided, found.cached, found.fetch) == ({}, [], list(lock.files))
    assert served.asked == [served.path_of(c) for c in lock.files]
    shared = shared_crds()
    assert _files(cache) == {c.path: (shared / c.path).read_bytes() for c in lock.files}  # no .partial left
    again = crd_fetch.ensure(lock, _roots(tmp_path, cache), cache, served.base)
    assert (again.cached, again.fetch, len(served.asked)) == (list(lock.files), [], len(lock.files))


def test_a_flipped_byte_is_refused_in_one_line_and_nothing_is_written(
    served: Upstream, cache: Path, tmp_path: Path
) -> None:
    lock = committed_lock()
    crd = next(c for c in lock.files if c.path == RAYJOBS)
    body = bytearray(served.files[served.path_of(crd)])
    body[len(body) // 2] ^= 0x01
    served.files[served.path_of(crd)] = bytes(body)
    with pytest.raises(Invalid) as caught:
        crd_fetch.ensure(lock, _roots(tmp_path, cache), cache, served.base)
    (line,) = caught.value.lines
    assert line.startswith(f"{served.base}{served.path_of(crd)}: sha256 ")
    assert line.endswith(
        f", requirements/crds.lock.json pins {crd.sha256} for {RAYJOBS}: not the pinned file "
        "(changed upstream or damaged on the way); nothing written"
    )
    assert not cache.exists()  # the files downloaded before it were not written either


def test_a_missing_file_is_one_line_naming_it_and_the_fix(served: Upstream, cache: Path, tmp_path: Path) -> None:
    lock = committed_lock()
    crd = next(c for c in lock.files if c.path == RAYJOBS)
    del served.files[served.path_of(crd)]
    with pytest.raises(Invalid) as caught:
        crd_fetch.ensure(lock, _roots(tmp_path, cache), cache, served.base)
    assert caught.value.lines == (
        f"{RAYJOBS}: cannot download {served.base}{served.path_of(crd)} (HTTP 404 Not Found); {crd_fetch.NOT_HERE}",
    )
    assert not cache.exists()


def test_without_a_network_it_says_what_is_missing(cache: Path, tmp_path: Path) -> None:
    base = closed_port_url()
    lock = committed_lock()
    with pytest.raises(Invalid) as caught:
        crd_fetch.ensure(lock, _roots(tmp_path, cache), cache, base)
    (line,) = caught.value.lines
    first = lock.files[0]
    assert line.startswith(f"{first.path}: cannot download {base}/ray-project/kuberay/")
    assert "Connection refused" in line
    assert line.endswith(
        "run `make setup` where raw.githubusercontent.com is reachable, or put them in "
        "../shared/crds or a folder named by $MERIDIAN_CRDS (requirements/crds.lock.json lists each "
        "file, URL and sha256)"
    )
    assert not cache.exists()


def test_a_body_larger_than_any_crd_is_refused(
    served: Upstream, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(crd_fetch, "MAX_BYTES", 1000)
    lock = committed_lock()
    with pytest.raises(Invalid) as caught:
        crd_fetch.ensure(lock, _roots(tmp_path, cache), cache, served.base)
    assert caught.value.lines == (
        f"{served.base}{served.path_of(lock.files[0])}: more than 1000 bytes, not a CRD; nothing written",
    )


def test_only_a_damaged_cached_file_is_downloaded_again(served: Upstream, cache: Path, tmp_path: Path) -> None:
    lock = committed_lock()
    crd_fetch.ensure(lock, _roots(tmp_path, cache), cache, served.base)
    (cache / RAYJOBS).write_bytes(b"kind: CustomResourceDefinition\n")  # cut short by an older, careless fetch
    served.asked.clear()
    found = crd_fetch.ensure(lock, _roots(tmp_path, cache), cache, served.base)
    assert [c.path for c in found.fetch] == [RAYJOBS]
    assert served.asked == [served.path_of(found.fetch[0])]
    assert (cache / RAYJOBS).read_bytes() == (shared_crds() / RAYJOBS).read_bytes()


def test_provided_crds_are_checked_and_never_downloaded(served: Upstream, cache: Path) -> None:
    lock = committed_lock()
    found = crd_fetch.ensure(lock, [shared_crds(), cache], cache, served.base)
    assert set(found.provided.values()) == {shared_crds()}
    assert set(found.provided) == {c.folder for c in lock.files}
    assert (found.cached, found.fetch, served.asked) == ([], [], [])


def test_a_provided_folder_that_is_not_the_pinned_one_is_named_file_by_file(
    served: Upstream, cache: Path, tmp_path: Path
) -> None:
    """Validation reads the first root holding a folder, so a damaged provided folder is never filled from upstream."""
    provided = tmp_path / "mine"
    shutil.copytree(shared_crds() / "kuberay", provided / "kuberay")
    (provided / RAYJOBS).write_bytes((provided / RAYJOBS).read_bytes().replace(b"RayJob", b"RayJub", 1))
    (provided / "kuberay/v1.7.0/ray.io_rayservices.yaml").unlink()
    with pytest.raises(Invalid) as caught:
        crd_fetch.ensure(committed_lock(), [provided, cache], cache, served.base)
    assert [line.split(":")[0] for line in caught.value.lines] == [
        str(provided / RAYJOBS),
        str(provided / "kuberay/v1.7.0/ray.io_rayservices.yaml"),
    ]
    assert "sha256 " in caught.value.lines[0]
    assert "absent from a folder of pinned CRDs that validation reads" in caught.value.lines[1]
    assert (served.asked, cache.exists()) == ([], False)
