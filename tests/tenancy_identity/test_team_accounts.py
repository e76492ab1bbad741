"""Team identities in the generated manifests and the rule on their derived names (issue 14)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from contract.problem import Invalid
from fleet import names
from fleet.load import load, load_text
from tests.conftest import REPO, SHIPPED

FLEET = load(SHIPPED).fleet


@pytest.mark.parametrize("region", [r.name for r in FLEET.regions])
def test_each_team_ksa_is_annotated_with_its_own_team_account(region: str) -> None:
    path = REPO / "kustomize" / "overlays" / FLEET.cluster_name(next(r for r in FLEET.regions if r.name == region))
    docs = [d for d in yaml.safe_load_all((path / "teams" / "teams.yaml").read_text()) if d]
    accounts = {
        d["metadata"]["namespace"]: d["metadata"]["annotations"]["iam.gke.io/gcp-service-account"]
        for d in docs
        if d["kind"] == "ServiceAccount"
    }
    assert accounts == {
        f"team-{t.name}": f"meridian-team-{t.name}@{FLEET.project.id}.iam.gserviceaccount.com" for t in FLEET.teams
    }
    assert len(set(accounts.values())) == len(FLEET.teams)


def test_a_team_account_name_too_long_for_iam_is_one_line(
    spec: dict[str, Any], write_spec: Callable[[dict[str, Any]], Path]
) -> None:
    spec["teams"][0]["name"] = "pretraining-and-more"  # meridian-team-pretraining-and-more: 34 > 30
    with pytest.raises(Invalid) as error:
        load_text(write_spec(spec).read_text())
    (line,) = [line for line in error.value.lines if "service account" in line]
    assert "longer than IAM's 30 characters" in line
    assert "shorten the team name" in line


def test_team_names_derive_distinct_prefixes_and_accounts() -> None:
    assert names.team_prefix("research") == "teams/research/"
    assert names.team_service_account_id(FLEET, "warden") != names.service_account_id(FLEET, "warden")
