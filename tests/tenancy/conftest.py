"""The admission policies as Argo CD will apply them: collected from the session's built cluster trees."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from fleet.gitops.admission import policies
from fleet.gitops.check import ClusterTree
from fleet.gitops.validate import Finding
from fleet.model import Fleet
from tests.tenancy.vap import Obj

Policies = Mapping[str, tuple[Obj, list[Obj]]]


@pytest.fixture(scope="session")
def cluster_policies(trees: dict[str, tuple[ClusterTree, list[Finding]]]) -> dict[str, Policies]:
    """region -> the policies (with their bindings) in that cluster's built tree."""
    return {region: policies(o for _, o in tree.objects()) for region, (tree, _) in trees.items()}


@pytest.fixture(scope="session")
def cluster_namespaces(trees: dict[str, tuple[ClusterTree, list[Finding]]]) -> dict[str, dict[str, Obj]]:
    """region -> namespace name -> the Namespace object in that cluster's built tree."""
    return {
        region: {o["metadata"]["name"]: o for _, o in tree.objects() if o.get("kind") == "Namespace"}
        for region, (tree, _) in trees.items()
    }


@pytest.fixture(scope="session")
def reports(
    fleet: Fleet, trees: dict[str, tuple[ClusterTree, list[Finding]]], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """region -> network-config-analyzer's report over that cluster's NetworkPolicies (test_network.py)."""
    from tests.tenancy.test_network import analyzer_reports

    return analyzer_reports(fleet, trees, tmp_path_factory)
