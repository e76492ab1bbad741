"""Each cluster's built tree holds exactly what its written-down inventory says (tests/gitops/inventory/).

Per cluster of the shipped fleet.yaml and of each example in platform/fleet/examples/: objects per kind,
the applications and projects, service accounts, RBAC rules and bindings, every pod template's account,
host access, privileges and images, NetworkPolicy peers and ports, admission policies and quotas. The
expected values are the committed files: a change fails here until `scripts/inventory.py --write`
rewrites them in the same commit.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from fleet.gitops.check import ClusterTree
from fleet.gitops.validate import Finding
from fleet.load import load
from tests.conftest import SHIPPED
from tests.inventory import GITOPS, built, cluster_file, cluster_text, committed, difference, fleets, name

Trees = dict[str, tuple[ClusterTree, list[Finding]]]
EXAMPLES = fleets()[1:]


def test_each_shipped_cluster_matches_its_inventory(trees: Trees) -> None:
    problems = [difference(cluster_file(SHIPPED, t.cluster), cluster_text(SHIPPED, t)) for t, _ in trees.values()]
    assert not any(problems), "\n".join(problems)


@pytest.mark.parametrize("fleet", EXAMPLES, ids=[name(f) for f in EXAMPLES])
def test_each_example_fleets_clusters_match_their_inventory(fleet: Path) -> None:
    problems = [difference(cluster_file(fleet, t.cluster), cluster_text(fleet, t)) for t in built(fleet)]
    assert not any(problems), "\n".join(problems)


def test_every_inventory_belongs_to_a_cluster() -> None:
    clusters = [(f, load(f).fleet) for f in fleets()]
    assert committed([GITOPS]) == {cluster_file(f, fl.cluster_name(r)) for f, fl in clusters for r in fl.regions}


def test_a_new_right_shows_as_a_diff(trees: Trees) -> None:
    tree = copy.deepcopy(trees["us-central1"][0])
    (role,) = (
        o for o in tree.apps["teams"] if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "meridian-queue-viewer"
    )
    role["rules"][0]["verbs"].append("delete")
    problem = difference(cluster_file(SHIPPED, tree.cluster), cluster_text(SHIPPED, tree))
    assert "-  ClusterRole meridian-queue-viewer: ['get,list,watch on kueue.x-k8s.io/clusterqueues']\n" in problem
    assert (
        "+  ClusterRole meridian-queue-viewer: ['get,list,watch,delete on kueue.x-k8s.io/clusterqueues']\n" in problem
    )
    assert problem.startswith("--- tests/gitops/inventory/fleet/meridian-us-central1.yaml (committed)\n")
