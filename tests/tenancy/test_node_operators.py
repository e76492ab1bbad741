"""Who may hold, release and report GPU nodes (`warden hold ...`: read and patch Nodes): the operators' group.

Patching a Node writes Warden's record and preflight's failure annotation, which Warden trusts; a team
that could would take other teams' nodes out of service at will (platform/warden/README.md).
"""

from __future__ import annotations

import pytest

from fleet.gitops.check import ClusterTree
from fleet.gitops.validate import Finding
from fleet.model import Fleet
from tests.tenancy.rbac import Access, Obj, User, allowed

Trees = dict[str, tuple[ClusterTree, list[Finding]]]
PERSON = [
    Access("patch", "", "nodes", name="gke-a3u-0"),
    Access("get", "", "nodes", name="gke-a3u-0"),
    Access("list", "", "nodes"),
]


def _objects(tree: ClusterTree) -> list[Obj]:
    return [o for _, o in tree.objects()]


def test_the_operators_group_may_hold_release_and_report_in_every_cluster(fleet: Fleet, trees: Trees) -> None:
    assert fleet.project.operators_group is not None
    oncall = User("oncall@meridian.example.com", ("system:authenticated", fleet.project.operators_group))
    for region, (tree, _) in trees.items():
        for access in PERSON:
            assert allowed(_objects(tree), oncall, access), (region, access)


def test_no_team_may_patch_nodes(fleet: Fleet, trees: Trees) -> None:
    members = [User(f"someone@{t.name}", ("system:authenticated", t.group)) for t in fleet.teams]
    for region, (tree, _) in trees.items():
        for user in members:
            assert not allowed(_objects(tree), user, PERSON[0]), (region, user.groups)


@pytest.mark.parametrize(
    "user",
    [
        User("stranger@gmail.com"),
        User("system:serviceaccount:team-research:trainer", ("system:authenticated", "system:serviceaccounts")),
    ],
)
def test_nobody_else_may_patch_nodes(trees: Trees, user: User) -> None:
    for region, (tree, _) in trees.items():
        assert not allowed(_objects(tree), user, PERSON[0]), (region, user.name)
