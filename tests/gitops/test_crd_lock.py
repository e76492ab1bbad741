"""requirements/crds.lock.json: exactly the CRDs the pinned versions need, with the pinned files' sha256."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contract.problem import Invalid
from fleet.gitops import crd_lock
from fleet.gitops.crd_sources import crd_sources
from fleet.model import Fleet
from tests.gitops.upstream_crds import committed_lock, shared_crds

SHA = "ab" * 32


def test_the_lock_names_exactly_the_crds_fleet_yaml_pins(fleet: Fleet) -> None:
    """A version bump in fleet.yaml (or a CRD added to crd_sources) fails here until the lock is rewritten."""
    assert [(c.path, c.url) for c in committed_lock().files] == crd_sources(fleet), crd_lock.FIX


def test_the_lock_holds_the_sha256_of_the_pinned_files(fleet: Fleet) -> None:
    assert committed_lock() == crd_lock.lock_of(crd_sources(fleet), shared_crds())


def test_the_lock_is_written_as_it_is_read() -> None:
    lock = committed_lock()
    assert crd_lock.loads(crd_lock.dumps(lock), "again") == lock
    assert lock.files[0].folder == "kuberay/v1.7.0"


def _document(**entry: str) -> str:
    crd = {"path": "kuberay/v1.7.0/ray.io_rayjobs.yaml", "url": "https://example.com/a.yaml", "sha256": SHA}
    return json.dumps({"schema": crd_lock.SCHEMA, "files": [{**crd, **entry}]})


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"path": "../../.bashrc.yaml"}, "files[0].path: '../../.bashrc.yaml' is not a relative path of a .yaml file"),
        ({"path": "/etc/kueue.yaml"}, "files[0].path: '/etc/kueue.yaml' is not a relative path of a .yaml file"),
        ({"path": "kueue/v1/x.sh"}, "files[0].path: 'kueue/v1/x.sh' is not a relative path of a .yaml file"),
        ({"url": "http://example.com/a.yaml"}, "files[0].url: 'http://example.com/a.yaml' is not an https:// URL"),
        ({"sha256": SHA.upper()}, f"files[0].sha256: '{SHA.upper()}' is not 64 lowercase hex digits"),
    ],
)
def test_a_lock_that_could_write_elsewhere_or_check_nothing_is_refused(entry: dict[str, str], problem: str) -> None:
    with pytest.raises(Invalid) as caught:
        crd_lock.loads(_document(**entry), "crds.lock.json")
    assert caught.value.lines == (f"crds.lock.json: {problem}; {crd_lock.FIX}",)


def test_a_damaged_lock_is_one_line_per_problem() -> None:
    with pytest.raises(Invalid) as caught:
        crd_lock.loads('{"schema": "meridian.crds-lock/v1", "files": [{"path": 1}]', "crds.lock.json")
    assert len(caught.value.lines) == 1
    assert caught.value.lines[0].startswith("crds.lock.json: not JSON")
    twice = json.loads(_document())
    twice["files"] *= 2
    with pytest.raises(Invalid) as caught:
        crd_lock.loads(json.dumps(twice), "crds.lock.json")
    assert [line.split(";")[0] for line in caught.value.lines] == [
        "crds.lock.json: files[1].path: 'kuberay/v1.7.0/ray.io_rayjobs.yaml' is listed twice"
    ]


def test_locking_a_folder_without_the_pinned_files_names_each(fleet: Fleet, tmp_path: Path) -> None:
    with pytest.raises(Invalid) as caught:
        crd_lock.lock_of(crd_sources(fleet)[:2], tmp_path)
    assert caught.value.lines == (
        f"{tmp_path}: no kuberay/v1.7.0/ray.io_rayclusters.yaml; put the pinned file there or lock from another folder",
        f"{tmp_path}: no kuberay/v1.7.0/ray.io_rayjobs.yaml; put the pinned file there or lock from another folder",
    )
