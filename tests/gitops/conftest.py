"""Rendering helpers for the gitops tests (the session's trees are in tests/conftest.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from fleet.gitops.schemas import crd_schemas
from fleet.gitops.tree import render_tree
from fleet.load import LoadedFleet
from fleet.model import Fleet
from fleet.planner import plan_addresses
from fleet.quotaplan import QuotaPlan, plan_quotas
from tests.conftest import REPO, SHIPPED

KUBECTL = str(Path(sys.executable).parent / "kubectl")


def quota_plan(fleet: Fleet) -> QuotaPlan:
    """The plan load() would make, for a spec edited in a test (problems are the loader's to report)."""
    return plan_quotas(fleet)[0]


def loaded(fleet: Fleet) -> LoadedFleet:
    """What load() would return for a spec edited in a test: the fleet with its plans, made once."""
    return LoadedFleet(SHIPPED, fleet, plan_addresses(fleet)[0], quota_plan(fleet))


_SCHEMAS: dict[str, dict[str, str]] = {}  # KubeRay version -> the schemas generated from its CRDs


def render(fleet: Fleet) -> dict[str, str]:
    """What `make generate` writes for a spec (edited in a test, maybe), with the schemas of its KubeRay."""
    version = fleet.versions.kuberay
    if version not in _SCHEMAS:
        _SCHEMAS[version] = crd_schemas(fleet, REPO)
    return render_tree(loaded(fleet), _SCHEMAS[version])
