"""Warden's config (contract.warden): the document fleet generates, what Warden reads, and the defaults, once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from contract import names
from contract import warden as config
from contract.problem import Invalid
from contract.registry import Thresholds
from contract.signals import ACTIONS, KINDS, SIGNAL_ACTIONS, default_actions
from fleet.catalog import thresholds
from fleet.gitops.warden import config as generated
from fleet.gitops.warden import warden_objects
from fleet.load import load
from tests.conftest import REPO, SHIPPED

FLEET = load(SHIPPED).fleet
REGION = FLEET.regions[0]


def test_the_config_survives_a_round_trip() -> None:
    for value in (
        config.DEFAULTS,
        generated(FLEET, REGION),
        replace(
            config.DEFAULTS,
            cluster="c",
            dry_run=False,
            xid_actions={79: "review", 13: "none"},
            signal_actions={"sxid": "reboot"},
            pools={
                "a": Thresholds(
                    gpus=8, min_tflops=600.5, min_busbw_one_node_gbps=368.0, min_busbw_many_nodes_gbps=256.0, rdma=True
                ),
                "cpu": Thresholds(
                    gpus=0, min_tflops=0.0, min_busbw_one_node_gbps=0.0, min_busbw_many_nodes_gbps=0.0, rdma=False
                ),
            },
        ),
    ):
        text = config.dumps(value)
        assert config.loads(text, "config.json") == value
        assert config.dumps(config.loads(text, "config.json")) == text  # byte for byte: regenerating is idempotent


def test_a_spec_that_sets_nothing_generates_the_contract_defaults(
    spec: dict[str, Any], write_spec: Callable[[dict[str, Any]], Path]
) -> None:
    spec.pop("warden", None)
    fleet = load(write_spec(spec)).fleet
    region = fleet.regions[0]
    expected = replace(
        config.DEFAULTS,
        cluster=fleet.cluster_name(region),
        region=region.name,
        probation_image=fleet.versions.trainer_image,
        pools={p.name: thresholds(p.machine) for p in region.gpu_pools},
    )
    assert generated(fleet, region) == expected
    # What fleet fills in itself: the cluster's identity and its machines, nothing the contract defaults.
    differs = {f.name for f in fields(config.Config) if getattr(expected, f.name) != getattr(config.DEFAULTS, f.name)}
    assert differs == {"cluster", "region", "probation_image", "pools"}


def test_the_tables_are_the_contract_signals_ones() -> None:
    assert config.DEFAULTS.xid_actions == default_actions()
    assert config.DEFAULTS.signal_actions == SIGNAL_ACTIONS
    assert set(SIGNAL_ACTIONS) == set(KINDS) - {"xid"}  # every kind but Xids has a default action
    assert set(config.DEFAULTS.xid_actions.values()) | set(SIGNAL_ACTIONS.values()) <= set(ACTIONS)


def test_the_generated_config_for_the_shipped_fleet() -> None:
    policy = generated(FLEET, REGION)
    assert (policy.dry_run, policy.act_on) == (False, "unambiguous")  # the new-fleet default (issue 28)
    assert policy.action_for("xid", 79) == "replace"
    assert policy.action_for("xid", 13) == "restart_pods"
    assert policy.action_for("xid", 31337) == "review"
    assert policy.action_for("something-new") == "review"
    assert (policy.max_per_pool, policy.window_s, policy.repeat_window_s) == (2, 3600.0, 7 * 86400.0)
    assert policy.action_for("maintenance") == "reboot"
    assert policy.action_for("not_ready") == "none"
    assert policy.probation_image == str(FLEET.versions.trainer_image)
    pool = REGION.gpu_pools[0].name
    assert policy.probation_args(pool) == ("--expect-gpus=8", "--min-tflops=600", "--min-busbw-gbps=368")
    assert policy.probation_args("no-such-pool") == ()


def test_signal_and_xid_actions_are_configurable_in_the_spec() -> None:
    changed = FLEET.model_copy(
        update={
            "warden": FLEET.warden.model_copy(
                update={"signal_actions": {"nccl_errors": "reboot"}, "xid_actions": {13: "reboot"}}
            )
        }
    )
    policy = generated(changed, changed.regions[0])
    assert policy.action_for("nccl_errors") == "reboot"
    assert policy.action_for("sxid") == "review"  # the rest keep their defaults
    assert policy.action_for("xid", 13) == "reboot"
    assert policy.action_for("xid", 79) == "replace"


@pytest.mark.parametrize(
    ("warden", "message"),
    [
        ({"signal_actions": {"gremlins": "reboot"}}, "gremlins"),
        ({"xid_actions": {79: "explode"}}, "explode"),
    ],
)
def test_the_spec_refuses_names_the_contract_does_not_know(
    spec: dict[str, Any], write_spec: Callable[[dict[str, Any]], Path], warden: dict[str, Any], message: str
) -> None:
    spec["warden"] = warden
    with pytest.raises(Invalid) as info:
        load(write_spec(spec))
    assert message in "\n".join(info.value.lines)


def test_one_configmap_per_cluster_holds_the_document_warden_reads() -> None:
    for region in FLEET.regions:
        (configmap,) = [o for o in warden_objects(FLEET, region) if o["kind"] == "ConfigMap"]
        assert (configmap["metadata"]["name"], configmap["metadata"]["namespace"]) == (
            names.WARDEN_CONFIGMAP,
            names.WARDEN_NAMESPACE,
        )
        assert list(configmap["data"]) == [config.FILE]
        assert config.loads(configmap["data"][config.FILE], "configmap") == generated(FLEET, region)
        # And the committed overlay is that document (`make generate` was run).
        overlay = REPO / "kustomize/overlays" / FLEET.cluster_name(region) / "warden/warden.yaml"
        committed = [d for d in yaml.safe_load_all(overlay.read_text()) if d and d["kind"] == "ConfigMap"]
        assert [d["data"][config.FILE] for d in committed] == [configmap["data"][config.FILE]]


def test_the_deployment_reads_the_config_where_the_configmap_is_mounted() -> None:
    deployment = yaml.safe_load((REPO / "kustomize/base/warden/deployment.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert f"--config={config.PATH}" in container["args"]
    (mount,) = container["volumeMounts"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert mount["mountPath"] == config.MOUNT
    assert volume["configMap"]["name"] == names.WARDEN_CONFIGMAP
