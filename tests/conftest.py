"""Shared fixtures: the repository root, the shipped fleet spec, spec editing helpers, and the session's one
synthesis and one render of every cluster's committed tree."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

if TYPE_CHECKING:
    from fleet.gitops.check import ClusterTree
    from fleet.gitops.validate import CrdSchemas, Finding
    from fleet.model import Fleet
    from meridian_infra.report import Stacks

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "fleet.yaml"
SHIPPED_SPEC: dict[str, Any] = yaml.safe_load(SHIPPED.read_text())


# The tiers (pyproject.toml's live and scenario markers) of the test running now: the helpers that start a live run
# refuse an unmarked test at once, whatever path it took to them (tests/tiers.py checks the source as well).
RUNNING_TIERS: set[str] = set()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Live modules on one xdist worker each, and those that would collide on one shared (tests/tiers.py)."""
    from tests.tiers import live_group

    if not config.pluginmanager.hasplugin("xdist"):  # -p no:xdist: one at a time, and no xdist_group marker
        return
    for item in items:
        if item.get_closest_marker("live"):
            module = item.nodeid.split("::")[0]
            item.add_marker(pytest.mark.xdist_group(live_group(module)))


def pytest_runtest_setup(item: pytest.Item) -> None:
    RUNNING_TIERS.clear()
    RUNNING_TIERS.update(mark.name for mark in item.iter_markers() if mark.name in ("live", "scenario"))


def new_region(name: str, zones: list[str], nodes: int = 64) -> dict[str, Any]:
    """A region to append to a spec: one flex-start H200 pool of ``nodes`` in its second zone."""
    return {
        "name": name,
        "zones": zones,
        "cluster": {"maintenance_window": {"days": ["SA", "SU"], "start_utc": "20:00", "hours": 8}},
        "system_pool": {"machine_type": "n2-standard-32", "nodes_per_zone": 2},
        "gpu_pools": [
            {
                "name": "h200-a",
                "machine_type": "a3-ultragpu-8g",
                "zone": zones[1],
                "nodes": nodes,
                "capacity": {"mode": "flex_start"},
            }
        ],
    }


@pytest.fixture
def spec() -> dict[str, Any]:
    """A fresh, editable copy of the shipped fleet spec as plain data."""
    return copy.deepcopy(SHIPPED_SPEC)


@pytest.fixture
def write_spec(tmp_path: Path) -> Callable[[dict[str, Any]], Path]:
    def write(data: dict[str, Any]) -> Path:
        path = tmp_path / "fleet.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return write


@pytest.fixture(scope="session")
def synth_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("infra") / "cdktf.out"


@pytest.fixture(scope="session")
def stacks(synth_dir: Path) -> Stacks:
    """The shipped fleet synthesized once per session (tests/infra, tests/review); read it, never edit it."""
    from meridian_infra.synth import synth  # imported here: most test folders never synthesize

    return synth(SHIPPED, synth_dir)


@pytest.fixture(scope="session")
def fleet() -> Fleet:
    from fleet.load import load

    return load(SHIPPED).fleet


@pytest.fixture(scope="session")
def crds(fleet: Fleet) -> CrdSchemas:
    from fleet.gitops.validate import CrdSchemas, crd_folders, crd_roots

    return CrdSchemas(crd_folders(fleet), crd_roots(REPO))


@pytest.fixture(scope="session")
def trees(fleet: Fleet) -> dict[str, tuple[ClusterTree, list[Finding]]]:
    """Every cluster's committed Argo CD tree, built once per session (tests/gitops, tenancy, review)."""
    import sys

    from fleet.gitops.check import load_tree

    kubectl = str(Path(sys.executable).parent / "kubectl")
    return {region.name: load_tree(REPO, fleet, region, kubectl) for region in fleet.regions}


@pytest.fixture
def served() -> Iterator[tuple[str, list[str]]]:
    """A local server that hands out a harmless ConfigMap and records every request: (its URL, the paths asked).
    What is fetched at render or sync time is refused before any request (tests/gitops/test_remote.py)."""
    import threading
    from http.server import ThreadingHTTPServer

    from tests.httpfake import JsonReplies

    asked: list[str] = []
    extra = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: warden-extra\ndata: {}\n"

    class Handler(JsonReplies):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_body(200, extra, "application/yaml")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/warden-extra.yaml", asked
    finally:
        server.shutdown()
        server.server_close()
