"""Build every cluster's committed Argo CD tree once per session."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fleet.gitops.check import ClusterTree, load_tree
from fleet.gitops.schemas import crd_schemas
from fleet.gitops.tree import render_tree
from fleet.gitops.validate import CrdSchemas, Finding, crd_folders, crd_roots
from fleet.load import load
from fleet.model import Fleet
from fleet.quotaplan import QuotaPlan, plan_quotas
from tests.conftest import REPO, SHIPPED

KUBECTL = str(Path(sys.executable).parent / "kubectl")


@pytest.fixture(scope="session")
def fleet() -> Fleet:
    return load(SHIPPED).fleet


def quota_plan(fleet: Fleet) -> QuotaPlan:
    """The plan load() would make, for a spec edited in a test (problems are the loader's to report)."""
    return plan_quotas(fleet)[0]


_SCHEMAS: dict[str, dict[str, str]] = {}  # KubeRay version -> the schemas generated from its CRDs


def render(fleet: Fleet) -> dict[str, str]:
    """What `make generate` writes for a spec (edited in a test, maybe), with the schemas of its KubeRay."""
    version = fleet.versions.kuberay
    if version not in _SCHEMAS:
        _SCHEMAS[version] = crd_schemas(fleet, REPO)
    return render_tree(fleet, quota_plan(fleet), _SCHEMAS[version])


@pytest.fixture(scope="session")
def crds(fleet: Fleet) -> CrdSchemas:
    return CrdSchemas(crd_folders(fleet), crd_roots(REPO))


@pytest.fixture(scope="session")
def trees(fleet: Fleet) -> dict[str, tuple[ClusterTree, list[Finding]]]:
    return {region.name: load_tree(REPO, fleet, region, KUBECTL) for region in fleet.regions}
