"""Who may hold, release and report GPU nodes (`warden hold ...`: read and patch Nodes): the operators' group.

Patching a Node writes Warden's record and preflight's failure annotation, which Warden trusts; a team
that could would take other teams' nodes out of service at will (platform/warden/README.md).
"""

from __future__ import annotations

import pytest
from trainer.launch.subblocks import NODE_READER

from fleet import names
from fleet.gitops.check import ClusterTree
from fleet.gitops.teams import TRAINER_NODE_READER, team_objects
from fleet.gitops.validate import Finding
from fleet.load import load
from fleet.model import Fleet
from tests.conftest import SHIPPED
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


def test_a_teams_trainer_account_may_get_a_node_by_name_and_nothing_more() -> None:
    """The Ray driver reads the sub-block label of its workers' Nodes (platform/trainer/README.md, "Sub-blocks
    under Ray"): each team's trainer account may get a Node it names; not list or watch them, not write one,
    not reach a subresource (nodes/proxy is the kubelet); no other account and no person gains anything."""
    loaded = load(SHIPPED)
    node = "gke-meridian-us-central1-h200-a-1a2b3c4d-x7k2"
    for region in loaded.fleet.regions:
        objects = team_objects(loaded, region)
        for team in loaded.fleet.teams:
            namespace = names.team_namespace(team.name)
            accounts = ("system:authenticated", "system:serviceaccounts", f"system:serviceaccounts:{namespace}")
            trainer = User(f"system:serviceaccount:{namespace}:{names.TRAINER_KSA}", accounts)
            assert allowed(objects, trainer, Access("get", "", "nodes", name=node)), (region.name, team.name)
            refused = [Access(verb, "", "nodes", name=node) for verb in ("patch", "update", "delete")]
            refused += [Access(verb, "", "nodes") for verb in ("list", "watch", "create")]
            refused += [Access("get", "", f"nodes/{sub}", name=node) for sub in ("proxy", "status", "log", "metrics")]
            for access in refused:
                assert not allowed(objects, trainer, access), (region.name, team.name, access)
            for other in (
                User(f"system:serviceaccount:{namespace}:default", accounts),
                User(f"someone@{team.name}", ("system:authenticated", team.group)),
            ):
                assert not allowed(objects, other, Access("get", "", "nodes", name=node)), (region.name, other.name)
    assert TRAINER_NODE_READER == NODE_READER  # the role the trainer's warning names when it is refused
