"""Who may read the registry ConfigMap in each cluster: every team's researchers, and nobody else.

gkr outside the repository fetches it with the researcher's own credentials, so each team's Google
group must be able to `get` it; on GKE `system:authenticated` is any Google account, so nothing may
be granted to it (or to the unauthenticated) anywhere in the tree.
"""

from __future__ import annotations

import pytest

from contract.registry import REGISTRY_CONFIGMAP, REGISTRY_NAMESPACE
from fleet.gitops.check import ClusterTree
from fleet.gitops.validate import Finding
from fleet.model import Fleet
from tests.tenancy.rbac import Access, Obj, User, allowed

Trees = dict[str, tuple[ClusterTree, list[Finding]]]
GET_REGISTRY = Access("get", "", "configmaps", REGISTRY_NAMESPACE, REGISTRY_CONFIGMAP)
EVERYONE = {"system:authenticated", "system:unauthenticated", "system:serviceaccounts"}


def _objects(tree: ClusterTree) -> list[Obj]:
    return [o for _, o in tree.objects()]


def _member(fleet: Fleet, team: str) -> User:
    group = next(t.group for t in fleet.teams if t.name == team)
    return User(f"someone-in-{team}@meridian.example.com", ("system:authenticated", group))


def test_every_team_member_can_get_the_registry_in_every_cluster(fleet: Fleet, trees: Trees) -> None:
    for region, (tree, findings) in trees.items():
        assert findings == [], region
        for team in fleet.teams:
            assert allowed(_objects(tree), _member(fleet, team.name), GET_REGISTRY), (region, team.name)


@pytest.mark.parametrize(
    "user",
    [
        User("stranger@gmail.com"),  # any Google account is system:authenticated on GKE
        User("system:anonymous", ("system:unauthenticated",)),
        User("system:serviceaccount:team-research:trainer", ("system:authenticated", "system:serviceaccounts")),
    ],
)
def test_nobody_else_can_get_it(trees: Trees, user: User) -> None:
    for region, (tree, _) in trees.items():
        assert not allowed(_objects(tree), user, GET_REGISTRY), (region, user.name)


@pytest.mark.parametrize(
    "access",
    [
        Access("list", "", "configmaps", REGISTRY_NAMESPACE),
        Access("watch", "", "configmaps", REGISTRY_NAMESPACE),
        Access("get", "", "configmaps", REGISTRY_NAMESPACE, "something-else"),
        Access("update", "", "configmaps", REGISTRY_NAMESPACE, REGISTRY_CONFIGMAP),
        Access("patch", "", "configmaps", REGISTRY_NAMESPACE, REGISTRY_CONFIGMAP),
        Access("delete", "", "configmaps", REGISTRY_NAMESPACE, REGISTRY_CONFIGMAP),
        Access("create", "", "configmaps", REGISTRY_NAMESPACE),
        Access("get", "", "secrets", REGISTRY_NAMESPACE, REGISTRY_CONFIGMAP),
        Access("get", "", "configmaps", "kube-system", REGISTRY_CONFIGMAP),
    ],
)
def test_a_team_member_may_only_get_it(fleet: Fleet, trees: Trees, access: Access) -> None:
    tree, _ = trees["us-east4"]
    assert allowed(_objects(tree), _member(fleet, "research"), GET_REGISTRY)
    assert not allowed(_objects(tree), _member(fleet, "research"), access)


def test_the_evaluator_follows_the_team_rbac(fleet: Fleet, trees: Trees) -> None:
    """The same authorizer grants what the team RBAC says: a team's own namespace only."""
    tree, _ = trees["us-east4"]
    research = _member(fleet, "research")
    assert allowed(_objects(tree), research, Access("create", "ray.io", "rayjobs", "team-research"))
    assert allowed(_objects(tree), research, Access("get", "", "pods/log", "team-research", "p"))
    assert allowed(_objects(tree), research, Access("list", "kueue.x-k8s.io", "clusterqueues"))
    assert not allowed(_objects(tree), research, Access("create", "ray.io", "rayjobs", "team-evals"))
    assert not allowed(_objects(tree), research, Access("patch", "kueue.x-k8s.io", "localqueues", "team-research"))


def test_nothing_is_granted_to_everyone(trees: Trees) -> None:
    for region, (tree, _) in trees.items():
        for o in _objects(tree):
            if o.get("kind") in ("RoleBinding", "ClusterRoleBinding"):
                names = {s.get("name") for s in o.get("subjects") or []}
                assert not names & (EVERYONE | {"system:anonymous"}), (region, o["metadata"]["name"])
