"""Which Ray cluster a Meridian process joins (contract.names.ray_address), resolved by Ray's own code.

Ray's ``ray.init()`` without an address joins the cluster named in ``<ray temp dir>/ray_current_cluster``,
which ``ray start`` and ``ray.cluster_utils.Cluster`` write (ray._private.services.get_ray_address_from_environment):
on a shared machine that is another user's cluster, or a dead one. CI met it: a module's ``ray.init(num_cpus=3)``
raised "When connecting to an existing cluster, num_cpus and num_gpus must not be provided" while a second test
run on the machine held a ``Cluster``.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from ray._private.services import canonicalize_bootstrap_address

from contract.names import RAY_ADDRESS_ENV, ray_address
from tests.conftest import REPO


@pytest.fixture
def another_cluster_ran_here(tmp_path: Path) -> Path:
    """A Ray temp dir whose ray_current_cluster names a cluster this process never started."""
    (tmp_path / "ray_current_cluster").write_text("10.9.8.7:6380")
    return tmp_path


def test_without_ray_address_a_process_starts_its_own_ray(
    another_cluster_ran_here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(RAY_ADDRESS_ENV, raising=False)
    # None: Ray starts a local instance (what ray.init(address=None) would not do here).
    assert canonicalize_bootstrap_address(ray_address({}), str(another_cluster_ran_here)) is None
    trap: Any = None  # what ray.init() passes on without an address (Ray's annotation says str; it takes None)
    assert canonicalize_bootstrap_address(trap, str(another_cluster_ran_here)) == "10.9.8.7:6380"


def test_in_a_kuberay_pod_the_process_joins_the_pods_cluster(another_cluster_ran_here: Path) -> None:
    # KubeRay sets RAY_ADDRESS in every Ray container; Ray's job supervisor sets it for a RayJob's driver.
    address = ray_address({RAY_ADDRESS_ENV: "10.0.0.7:6379"})
    assert canonicalize_bootstrap_address(address, str(another_cluster_ran_here)) == "10.0.0.7:6379"
    assert ray_address({RAY_ADDRESS_ENV: ""}) == "local"  # set but empty: Ray's own reading ignores it too


def _ray_init_calls(path: Path) -> list[ast.Call]:
    tree = ast.parse(path.read_text(), str(path))
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "init"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "ray"
    ]


def test_every_ray_init_names_its_cluster() -> None:
    """A ray.init without an address would join whatever cluster last started on the machine."""
    files = [*REPO.glob("platform/*/src/**/*.py"), *REPO.glob("scripts/*.py"), *REPO.glob("tests/**/*.py")]
    calls = {p: _ray_init_calls(p) for p in files}
    assert sum(map(len, calls.values())) >= 4  # the trainer, preflight and the tests' own local Rays
    unnamed = [
        f"{p.relative_to(REPO)}:{c.lineno}"
        for p, found in calls.items()
        for c in found
        if not c.args and not any(k.arg == "address" for k in c.keywords)
    ]
    assert not unnamed, f"ray.init without an address (use contract.names.ray_address): {unnamed}"
