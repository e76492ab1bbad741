"""The admission policies as Argo CD will apply them: collected from the session's built cluster trees."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from fleet.gitops.admission import policies
from fleet.gitops.check import ClusterTree
from fleet.gitops.validate import Finding
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
