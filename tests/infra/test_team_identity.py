"""One Google service account per team, bound to its own namespace's KSA, and checkpoint
access that ends at the team's managed folder (issue 14).

The attacker case reads every grant any stack gives a team's account and asks whether it
admits an object under another team's prefix; IAM conditions, where a grant has one, are
evaluated as the CEL they are.
"""

from __future__ import annotations

import re
from typing import Any

import cel
import pytest

from fleet import names
from fleet.load import load
from meridian_infra.report import Stacks, resources
from tests.conftest import SHIPPED

FLEET = load(SHIPPED).fleet
TEAMS = [t.name for t in FLEET.teams]
PROJECT = FLEET.project.id
REF = re.compile(r"\$\{(google_[a-z_]+)\.([A-Za-z0-9_-]+)\.name\}")
WRITE_ROLES = {"roles/storage.objectUser", "roles/storage.objectAdmin", "roles/storage.objectCreator"}


def of_type(stack: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return dict(stack.get("resource", {}).get(kind, {}))


def resolve(stack: dict[str, Any], value: str) -> str:
    """A literal, or the `name` of the resource a `${kind.id.name}` reference points at."""
    found = REF.fullmatch(value)
    return str(of_type(stack, found[1])[found[2]]["name"]) if found else value


def team_of(member: str) -> str | None:
    """The team whose account `member` is, in the global stack's or a region's spelling."""
    for team in TEAMS:
        key = team.replace("-", "_")
        if member in (
            f"serviceAccount:${{google_service_account.sa_team_{team}.email}}",
            f"serviceAccount:${{data.terraform_remote_state.global_state.outputs.team_{key}_service_account}}",
        ):
            return team
    return None


def grants_to(stacks: Stacks, team: str) -> list[tuple[dict[str, Any], str, dict[str, Any]]]:
    """(stack, kind, body) of every IAM grant whose member is the team's account."""
    return [
        (stack, kind, body)
        for stack in stacks.values()
        for kind, _, body in resources(stack)
        if kind.endswith("_iam_member") and team_of(str(body.get("member", ""))) == team
    ]


def admits(stack: dict[str, Any], kind: str, body: dict[str, Any], bucket: str, obj: str) -> bool:
    """Whether this grant lets its member at object `obj` of `bucket`."""
    if kind == "google_storage_managed_folder_iam_member":
        scoped = resolve(stack, body["bucket"]) == bucket and obj.startswith(resolve(stack, body["managed_folder"]))
    elif kind == "google_storage_bucket_iam_member":
        scoped = resolve(stack, body["bucket"]) == bucket
    elif kind == "google_project_iam_member":
        scoped = True  # a project grant reaches every bucket
    else:
        return False
    condition = body.get("condition")
    if not scoped or condition is None:
        return scoped
    resource = {"name": f"projects/_/buckets/{bucket}/objects/{obj}"}
    return bool(cel.evaluate(condition["expression"], {"resource": resource}))


def test_one_google_service_account_per_team(stacks: Stacks) -> None:
    accounts = {body["account_id"] for body in of_type(stacks["global"], "google_service_account").values()}
    assert {names.team_service_account_id(FLEET, t) for t in TEAMS} <= accounts
    assert names.service_account_id(FLEET, "trainer") not in accounts  # the shared account is gone
    for team in TEAMS:
        assert f"team_{team.replace('-', '_')}_service_account" in stacks["global"]["output"]


def test_each_team_account_admits_only_its_own_namespace(stacks: Stacks) -> None:
    bindings = of_type(stacks["global"], "google_service_account_iam_member").values()
    for team in TEAMS:
        own = [b for b in bindings if b["service_account_id"] == f"${{google_service_account.sa_team_{team}.name}}"]
        assert [(b["role"], b["member"]) for b in own] == [
            ("roles/iam.workloadIdentityUser", f"serviceAccount:{PROJECT}.svc.id.goog[team-{team}/trainer]")
        ]
        # ...and no other account can be taken on from the team's namespace.
        others = [b for b in bindings if f"[team-{team}/" in b["member"] and b not in own]
        assert others == []


@pytest.mark.parametrize("region", [r.name for r in FLEET.regions])
def test_team_accounts_get_their_managed_folder_and_no_bucket_wide_write(stacks: Stacks, region: str) -> None:
    stack = stacks[region]
    bucket = FLEET.buckets.checkpoint_bucket(region)
    folders = {body["name"] for body in of_type(stack, "google_storage_managed_folder").values()}
    assert folders == {f"teams/{t}/" for t in TEAMS}
    for team in TEAMS:
        grants = grants_to(stacks, team)
        assert grants, team
        for grant_stack, kind, body in grants:
            bucket_wide = kind in ("google_storage_bucket_iam_member", "google_project_iam_member")
            if bucket_wide and body.get("condition") is None:
                assert body["role"] not in WRITE_ROLES, (team, body)
                assert resolve(grant_stack, body.get("bucket", "")) != bucket, (team, body)  # datasets only
        own = f"teams/{team}/checkpoints/run-1/step-00000100/shard-0"
        assert any(admits(s, k, b, bucket, own) and b["role"] in WRITE_ROLES for s, k, b in grants), team


@pytest.mark.parametrize("region", [r.name for r in FLEET.regions])
def test_attacker_team_a_reaches_nothing_of_team_b(stacks: Stacks, region: str) -> None:
    bucket = FLEET.buckets.checkpoint_bucket(region)
    for attacker in TEAMS:
        grants = grants_to(stacks, attacker)
        for victim in TEAMS:
            if victim == attacker:
                continue
            for obj in (
                f"teams/{victim}/checkpoints/run-1/step-00000100/shard-0",
                f"teams/{victim}/staged/run-1/step-00000200/shard-0",
                f"teams/{victim}/",
                f"teams/{attacker}-x/anything",  # a longer team name that starts with the attacker's
                "staged/run-1/shard-0",  # the old shared layout, outside every team's folder
            ):
                hits = [b for s, k, b in grants if admits(s, k, b, bucket, obj)]
                assert hits == [], (attacker, obj, hits)


def test_a_prefix_condition_is_evaluated_not_pattern_matched() -> None:
    """The evaluator the attacker test relies on: a condition on one team's prefix refuses the other's."""
    expression = 'resource.name.startsWith("projects/_/buckets/b/objects/teams/research/")'
    assert admits(
        {},
        "google_storage_bucket_iam_member",
        {"bucket": "b", "condition": {"expression": expression}},
        "b",
        "teams/research/x",
    )
    assert not admits(
        {},
        "google_storage_bucket_iam_member",
        {"bucket": "b", "condition": {"expression": expression}},
        "b",
        "teams/evals/x",
    )
    assert not admits(
        {},
        "google_storage_bucket_iam_member",
        {"bucket": "b", "condition": {"expression": expression}},
        "b",
        "teams/research-x/x",
    )
