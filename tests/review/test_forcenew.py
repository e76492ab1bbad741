"""What forces replacement comes from the pinned provider's schema; the hand list holds only in-place recreations."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from importlib import metadata
from types import ModuleType

import pytest

from review.terraform import Change, forcing, provider_forcenew, recreating_attributes, replacement_attributes
from tests.conftest import REPO

SCRIPT = REPO / "scripts/provider_forcenew.py"
DATA = REPO / "platform/review/src/review/provider_forcenew.json"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("provider_forcenew", SCRIPT)
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


forcenew = _script()

# A provider in miniature: a shared schema function embedded under node_config, a nested
# block, a ForceNew block (its fields decide for themselves), MergeSchemas, a var, and
# CustomizeDiff's conditional ForceNew. Braces in strings and comments must not confuse it.
GO_POOL = """
package container

// "node_config": { ForceNew: true } in a comment is not code
var schemaNodePool = map[string]*schema.Schema{
	"node_count": {Type: schema.TypeInt, Optional: true, Description: `per zone {not a block}`},
	"node_locations": {Type: schema.TypeSet, Optional: true, Elem: &schema.Schema{Type: schema.TypeString}},
	"placement_policy": {
		Type: schema.TypeList, Optional: true, ForceNew: true, MaxItems: 1,
		Elem: &schema.Resource{Schema: map[string]*schema.Schema{
			"type":        {Type: schema.TypeString, Required: true},
			"policy_name": {Type: schema.TypeString, Optional: true, ForceNew: true},
		}},
	},
	"node_config": schemaNodeConfig(),
	"upgrade_settings": upgradeSettings,
}

var upgradeSettings = &schema.Schema{Type: schema.TypeList, Optional: true}

func ResourceContainerNodePool() *schema.Resource {
	return &schema.Resource{
		CustomizeDiff: customdiff.All(customdiff.ForceNewIfChange("node_count", isShrink), poolDiff),
		Schema: tpgresource.MergeSchemas(
			schemaNodePool,
			map[string]*schema.Schema{
				"cluster": {Type: schema.TypeString, Required: true, ForceNew: true},
				"deletion_policy": tpgresource.DeletionPolicySchemaEntry("DELETE"),
			}),
	}
}

func poolDiff(_ context.Context, d *schema.ResourceDiff, meta interface{}) error {
	if d.HasChange("node_config.0.labels") {
		return d.ForceNew("node_config.0.labels")
	}
	return nil
}
"""
GO_NODE_CONFIG = """
package container

func schemaNodeConfig() *schema.Schema {
	return &schema.Schema{
		Type: schema.TypeList, Optional: true, ForceNew: true, MaxItems: 1,
		Elem: &schema.Resource{
			Schema: map[string]*schema.Schema{
				"machine_type": {Type: schema.TypeString, Optional: true},
				"oauth_scopes": {Type: schema.TypeSet, Optional: true, ForceNew: true, Elem: &schema.Schema{Type: schema.TypeString}},
				"labels": {Type: schema.TypeMap, Optional: true, Elem: &schema.Schema{Type: schema.TypeString}},
				"guest_accelerator": {
					Type: schema.TypeList, Optional: true, ForceNew: true,
					Elem: &schema.Resource{Schema: map[string]*schema.Schema{
						"count": {Type: schema.TypeInt, Required: true, ForceNew: true},
						"type": {Type: schema.TypeString, Required: true, ForceNew: true, DiffSuppressFunc: func(k, old, new string, d *schema.ResourceData) bool { return old == "{" }},
					}},
				},
			},
		},
	}
}
"""


def test_extraction_follows_shared_schemas_blocks_and_merges() -> None:
    files = {"c/pool.go": GO_POOL, "c/node_config.go": GO_NODE_CONFIG}
    got = forcenew.extract(
        files.__getitem__,
        {"google_container_node_pool": ("c/pool.go", "ResourceContainerNodePool")},
        ["c/node_config.go"],
    )
    kind = "google_container_node_pool"
    assert got["force_new"][kind] == [
        "cluster",
        "node_config.guest_accelerator.count",
        "node_config.guest_accelerator.type",
        "node_config.oauth_scopes",
        "placement_policy.policy_name",
    ]
    assert got["force_new_blocks"][kind] == ["node_config", "node_config.guest_accelerator", "placement_policy"]
    assert got["force_new_if"][kind] == [
        {"path": "node_config.labels", "condition": "poolDiff"},
        {"path": "node_count", "condition": "isShrink"},
    ]
    assert got["unresolved"][kind] == ["deletion_policy: tpgresource.DeletionPolicySchemaEntry"]


def test_extraction_refuses_a_resource_it_cannot_find() -> None:
    with pytest.raises(forcenew.SourceError, match=r"no `return &schema\.Resource"):
        forcenew.extract(lambda _: "package x\n", {"t": ("x.go", "ResourceX")}, [])


def test_committed_file_is_what_the_provider_source_gives() -> None:
    if not (forcenew.MIRROR / "HEAD").is_file():
        pytest.skip(f"no provider source at {forcenew.MIRROR} (a bare clone of hashicorp/terraform-provider-google)")
    result = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_every_guarded_type_was_read_and_only_known_entries_were_not() -> None:
    data = provider_forcenew()
    assert set(data["force_new"]) == set(forcenew.RESOURCES)
    assert all(data["force_new"].values())
    # The deletion_policy field is the provider's own (not in the API), and the bucket's enforcement
    # configs are built by a function with arguments; neither holds a ForceNew attribute.
    assert {k: v for k, v in data["unresolved"].items() if v} == {
        "google_container_cluster": ["deletion_policy: tpgresource.DeletionPolicySchemaEntry"],
        "google_container_node_pool": ["deletion_policy: tpgresource.DeletionPolicySchemaEntry"],
        "google_storage_bucket": [
            "deletion_policy: tpgresource.DeletionPolicySchemaEntry",
            "encryption.customer_managed_encryption_enforcement_config: buckeEncryptionEnforcementConfigSchema",
            "encryption.customer_supplied_encryption_enforcement_config: buckeEncryptionEnforcementConfigSchema",
            "encryption.google_managed_encryption_enforcement_config: buckeEncryptionEnforcementConfigSchema",
        ],
    }


def test_hand_list_holds_no_forcenew_attribute() -> None:
    """replacement.yaml is for in-place updates that recreate nodes: a ForceNew path there is a copy."""
    data = provider_forcenew()
    for kind, attributes in recreating_attributes().items():
        assert kind in data["force_new"], f"{kind}: not a type the provider file covers"
        schema = set(data["force_new"][kind]) | {c["path"] for c in data["force_new_if"][kind]}
        for path, entry in attributes.items():
            covered = [p for p in schema if p == path or p.startswith(f"{path}.") or path.startswith(f"{p}.")]
            assert not covered, f"{kind} {path}: ForceNew in the provider schema ({covered}); drop it from the list"
            assert sorted(entry) == ["source", "why"], f"{kind} {path}: give a why and a source"
            assert all(entry.values()), f"{kind} {path}: give a why and a source"


def test_what_forces_is_the_schema_plus_the_hand_list_and_nothing_else() -> None:
    data = provider_forcenew()
    recreating = recreating_attributes()
    for kind, attributes in replacement_attributes().items():
        claimed = set(attributes) - set(recreating.get(kind, {}))
        schema = set(data["force_new"].get(kind, [])) | {c["path"] for c in data["force_new_if"].get(kind, [])}
        assert claimed == schema, f"{kind}: claimed ForceNew but not in the file: {sorted(claimed - schema)}"


def test_estimate_follows_the_schema() -> None:
    table = replacement_attributes()
    pool = "google_container_node_pool"
    accelerator = Change("node_config.guest_accelerator.0.count", 8, 4)  # ForceNew in the schema
    move = Change("node_locations.0", "us-east4-b", "us-east4-c")  # in place, but every node moves
    machine = Change("node_config.machine_type", "a3-ultragpu-8g", "a3-highgpu-8g")  # in place, nodes recreated
    labels = Change("node_config.labels.team", "a", "b")  # in place, nodes kept
    placement = Change("placement_policy.type", "COMPACT", "")  # the block is ForceNew, its type is not
    assert forcing(pool, [accelerator, move, machine, labels, placement], table) == [accelerator, move, machine]


def test_lock_and_recorded_provider_versions_agree() -> None:
    data = json.loads(DATA.read_text())
    lock = re.search(r"^cdktn-provider-google==(\S+)", (REPO / "requirements/dev.lock").read_text(), re.M)
    assert lock, "requirements/dev.lock pins no cdktn-provider-google"
    assert data["pinned"]["package_version"] == lock.group(1) == metadata.version("cdktn-provider-google")
    description = str(metadata.metadata("cdktn-provider-google").get_payload())  # type: ignore[attr-defined]
    assert f"hashicorp/google provider version {data['pinned']['provider_version']}" in description
    source, pinned = data["source"]["version"], data["pinned"]["provider_version"]
    if source == pinned:
        assert data["note"] == ""
    else:  # the source read is not the pinned release: the file says so, naming both
        assert f"provider source {source}" in data["note"]
        assert f"built for provider {pinned}" in data["note"]
        assert "not reflected" in data["note"]


def test_source_today_is_the_800_release_not_the_870_pin() -> None:
    """The only provider snapshot available is the 8.0.0 merge; when a v8.7.0 one is, rerun the script."""
    data = provider_forcenew()
    assert (data["source"]["version"], data["pinned"]["provider_version"]) == ("8.0.0", "8.7.0")
    assert data["source"]["commit"].startswith("e03b7622a2")
