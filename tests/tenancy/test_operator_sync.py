"""The operators' group may pause and resume an Argo CD Application's automated sync, and change nothing else.

Its Role allows `get` and `patch` on Application `warden` (fleet.gitops.operators), so that WardenSplitLeadership's
`kubectl scale` is not undone by self-heal; RBAC cannot limit which fields a patch changes, so without the policy
the same patch could point Warden's application at another revision, repository, destination or project, or start a
sync of any revision, and deploy what nobody reviewed. Each hostile patch is applied to the live Application and
judged by every policy of the committed tree with the real CEL library (tests/tenancy/vap.py): refused by the guard's
own validation, never by a CEL error. Argo CD's own writes (status, operation) and anyone outside the group are left
alone.
"""

from __future__ import annotations

from typing import Any

import pytest

from fleet.gitops import operators
from fleet.gitops.argocd import PAUSE_POINTER
from fleet.gitops.check import ClusterTree
from fleet.gitops.validate import Finding
from fleet.model import Fleet
from tests.tenancy import applications as apps
from tests.tenancy.conftest import Policies
from tests.tenancy.rbac import Access, User, allowed
from tests.tenancy.vap import Outcome, admit

Trees = dict[str, tuple[ClusterTree, list[Finding]]]
Obj = dict[str, Any]
ONCALL = "oncall@meridian.example.com"
APP = operators.WARDEN_APPLICATION


def pause(enabled: bool | None) -> Obj:
    return {"spec": {"syncPolicy": {"automated": {"enabled": enabled}}}}


# name -> (merge patch the group sends, the words of the validation that must refuse it)
HOSTILE: dict[str, tuple[Obj, str]] = {
    "another revision": ({"spec": {"source": {"targetRevision": "unreviewed-branch"}}}, "revision"),
    "another repository": ({"spec": {"source": {"repoURL": "https://github.com/someone/fork.git"}}}, "revision"),
    "another path": ({"spec": {"source": {"path": "kustomize/overlays/meridian-us-east4/teams"}}}, "revision"),
    "another project": ({"spec": {"project": "default"}}, "project"),
    "another namespace": ({"spec": {"destination": {"namespace": "kube-system"}}}, "destination"),
    "another cluster": ({"spec": {"destination": {"server": "https://203.0.113.7"}}}, "destination"),
    "a new spec key: sources": (
        {"spec": {"sources": [{"repoURL": "https://github.com/someone/fork.git", "path": "x"}]}},
        "source",
    ),
    "a new spec key: revisionHistoryLimit": ({"spec": {"revisionHistoryLimit": 0}}, "source"),
    "a new spec key: ignoreDifferences": (
        {"spec": {"ignoreDifferences": [{"group": "apps", "kind": "Deployment", "jsonPointers": ["/spec"]}]}},
        "source",
    ),
    "prune off": ({"spec": {"syncPolicy": {"automated": {"prune": False}}}}, "sync policy"),
    "self-heal off": ({"spec": {"syncPolicy": {"automated": {"selfHeal": False}}}}, "sync policy"),
    "allowEmpty on": ({"spec": {"syncPolicy": {"automated": {"allowEmpty": True}}}}, "sync policy"),
    "automated removed": ({"spec": {"syncPolicy": {"automated": None}}}, "sync policy"),
    "syncPolicy removed": ({"spec": {"syncPolicy": None}}, "sync policy"),
    "syncOptions": ({"spec": {"syncPolicy": {"syncOptions": ["Replace=true"]}}}, "sync policy"),
    "retry": ({"spec": {"syncPolicy": {"retry": {"limit": 0}}}}, "sync policy"),
    "pause and another revision at once": (
        {"spec": {"syncPolicy": {"automated": {"enabled": False}}, "source": {"targetRevision": "unreviewed-branch"}}},
        "revision",
    ),
    "finalizers removed": ({"metadata": {"finalizers": None}}, "finalizers"),
    "a label": ({"metadata": {"labels": {"app.kubernetes.io/managed-by": "me"}}}, "labels"),
    "an annotation": ({"metadata": {"annotations": {"argocd.argoproj.io/sync-wave": "-9"}}}, "annotations"),
    "an operation": (
        {"operation": {"sync": {"revision": "unreviewed-branch"}, "initiatedBy": {"username": ONCALL}}},
        "operation",
    ),
    "an operation in progress, forged in status": (
        {
            "status": {
                "operationState": {
                    "phase": "Running",
                    "startedAt": "2026-01-05T11:00:00Z",
                    "operation": {"sync": {"revision": "unreviewed-branch"}, "initiatedBy": {"username": ONCALL}},
                }
            }
        },
        "status",
    ),
    "a status": ({"status": {"health": {"status": "Degraded"}}}, "status"),
}


def _operator(fleet: Fleet) -> tuple[str, tuple[str, ...]]:
    assert fleet.project.operators_group is not None
    return ONCALL, ("system:authenticated", fleet.project.operators_group)


def _judge(
    policies: Policies, operation: str, new: Obj | None, old: Obj | None, who: tuple[str, tuple[str, ...]]
) -> list[Outcome]:
    app = new if new is not None else old
    assert app is not None
    req = apps.request(operation, app, *who)
    return admit(policies, req, new, old, apps.ARGOCD_NAMESPACE)


def _refusals(outcomes: list[Outcome]) -> list[Outcome]:
    return [o for o in outcomes if o.denied]


def test_the_runbooks_pause_and_resume_are_admitted(
    fleet: Fleet, trees: Trees, cluster_policies: dict[str, Policies]
) -> None:
    assert "/" + operators.PAUSE_FIELD.replace(".", "/") == PAUSE_POINTER
    for region, (tree, _) in trees.items():
        live = apps.live(tree, APP)
        paused = apps.written(live, pause(False))
        steps = [
            (live, paused),
            (paused, apps.written(paused, pause(True))),
            (paused, apps.written(paused, pause(None))),
        ]
        for old, new in steps:
            outcomes = _judge(cluster_policies[region], "UPDATE", new, old, _operator(fleet))
            assert [o.policy for o in outcomes] == [operators.SYNC_GUARD], region  # judged, by the guard only
            assert _refusals(outcomes) == [], (region, outcomes)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_any_other_change_by_the_operators_is_refused(
    case: str, fleet: Fleet, trees: Trees, cluster_policies: dict[str, Policies]
) -> None:
    patch, words = HOSTILE[case]
    for region, (tree, _) in trees.items():
        for old in (apps.live(tree, APP), apps.written(apps.live(tree, APP), pause(False))):
            new = apps.written(old, patch)
            assert new != old
            refused = _refusals(_judge(cluster_policies[region], "UPDATE", new, old, _operator(fleet)))
            assert [(o.policy, o.error) for o in refused] == [(operators.SYNC_GUARD, "")], (region, refused)
            assert words in refused[0].message, refused[0].message
            assert "a commit" in refused[0].message
            assert operators.PAUSE_FIELD in refused[0].message


def test_the_operators_may_neither_delete_nor_create_an_application(
    fleet: Fleet, trees: Trees, cluster_policies: dict[str, Policies]
) -> None:
    for region, (tree, _) in trees.items():
        live = apps.live(tree, APP)
        for operation, new, old in (
            ("DELETE", None, live),
            ("CREATE", apps.merge_patch(live, {"metadata": {"name": "rogue"}}), None),
        ):
            refused = _refusals(_judge(cluster_policies[region], operation, new, old, _operator(fleet)))
            assert [(o.policy, o.error) for o in refused] == [(operators.SYNC_GUARD, "")], (region, operation)
            assert "create or delete" in refused[0].message


def test_rbac_gives_the_operators_only_get_and_patch_of_the_one_application(fleet: Fleet, trees: Trees) -> None:
    user = User(*_operator(fleet))
    for region, (tree, _) in trees.items():
        objects = [o for _, o in tree.objects()]
        verbs = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
        granted = {v for v in verbs if allowed(objects, user, Access(v, "argoproj.io", "applications", "argocd", APP))}
        assert granted == {"get", "patch"}, region
        assert not allowed(objects, user, Access("patch", "argoproj.io", "applications", "argocd", "root")), region
        assert not allowed(objects, user, Access("patch", "argoproj.io", "appprojects", "argocd", "platform")), region


def _argocd_writes(live: Obj) -> list[tuple[str, Obj, Obj]]:
    """(writer, old, new) for Argo CD's own updates of an Application (argo-cd v3.5.1)."""
    running = {"phase": "Running", "startedAt": "2026-01-05T11:00:00Z", "operation": {"sync": {"revision": "HEAD"}}}
    done = {**running, "phase": "Succeeded", "finishedAt": "2026-01-05T11:01:00Z"}
    automated = {"sync": {"revision": "HEAD"}, "initiatedBy": {"automated": True}}
    by_hand = {"sync": {"revision": "HEAD"}, "initiatedBy": {"username": "someone"}}
    syncing = apps.written(live, {"operation": automated, "status": {"operationState": None}})
    return [
        # controller/appcontroller.go persistAppStatus: a merge patch of status and annotations
        (apps.CONTROLLER, live, apps.written(live, {"status": {"health": {"status": "Progressing"}}})),
        # autoSync -> util/argo/argo.go SetAppOperation: the whole object, `operation` set, operationState cleared
        (apps.CONTROLLER, live, syncing),
        # setOperationState: the operation running, then completed and `operation` cleared
        (apps.CONTROLLER, syncing, apps.written(syncing, {"status": {"operationState": running}})),
        (apps.CONTROLLER, syncing, apps.written(syncing, {"operation": None, "status": {"operationState": done}})),
        # server/application/application.go Sync (through Argo CD's API, under its own RBAC): SetAppOperation too
        (apps.SERVER, live, apps.written(live, {"operation": by_hand, "status": {"operationState": None}})),
        # the root application syncing a reviewed commit that changes Warden's application
        (apps.CONTROLLER, live, apps.written(live, {"spec": {"source": {"targetRevision": "release-2"}}})),
    ]


def test_argo_cds_own_writes_and_other_people_are_not_judged(
    trees: Trees, cluster_policies: dict[str, Policies]
) -> None:
    for region, (tree, _) in trees.items():
        live = apps.live(tree, APP)
        for writer, old, new in _argocd_writes(live):
            assert new != old
            outcomes = _judge(cluster_policies[region], "UPDATE", new, old, (writer, apps.SERVICE_ACCOUNT_GROUPS))
            assert outcomes == [], (region, writer, outcomes)
        # A platform admin outside the group (break glass) is RBAC's concern, not this policy's.
        admin = ("admin@meridian.example.com", ("system:authenticated", "gke-security-groups@meridian.example.com"))
        new = apps.written(live, HOSTILE["another revision"][0])
        assert _judge(cluster_policies[region], "UPDATE", new, live, admin) == [], region


def test_the_guard_matches_applications_for_the_operators_group_only(
    fleet: Fleet, cluster_policies: dict[str, Policies]
) -> None:
    for region, policies in cluster_policies.items():
        policy, bindings = policies[operators.SYNC_GUARD]
        spec = policy["spec"]
        assert spec["failurePolicy"] == "Fail"
        assert spec["matchConstraints"] == {
            "resourceRules": [
                {
                    "apiGroups": ["argoproj.io"],
                    "apiVersions": ["v1alpha1"],
                    "operations": ["CREATE", "UPDATE", "DELETE"],
                    "resources": ["applications"],
                }
            ]
        }, region  # no namespaceSelector: every namespace Argo CD could watch
        (condition,) = spec["matchConditions"]
        assert f'"{fleet.project.operators_group}" in request.userInfo.groups' in condition["expression"]
        assert [b["spec"] for b in bindings] == [{"policyName": operators.SYNC_GUARD, "validationActions": ["Deny"]}]
