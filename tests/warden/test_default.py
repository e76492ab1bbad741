"""A new fleet's Warden (issue 28): it acts on unambiguous faults and only logs the rest."""

from __future__ import annotations

from dataclasses import replace

import pytest

from contract import warden as config
from contract.names import WARDEN_PHASE_LABEL
from fleet.gitops.warden import config as generated
from fleet.load import load
from preflight.report import Result, node_annotation
from tests.conftest import SHIPPED
from tests.warden.fakes import node
from tests.warden.test_kube import POLICY, Cluster, cluster, record_of, xid_condition
from warden.policy import Policy, Signal
from warden.state import Budget, Facts, Record, carried_out, decide

__all__ = ["cluster"]  # the fixture, imported for its side effect on pytest

FLEET = load(SHIPPED).fleet
SHIPPED_POLICY = generated(FLEET, FLEET.regions[0])
OPEN = Budget(may_quarantine=True, may_remediate=True)


def test_a_new_fleet_acts_on_unambiguous_faults_only() -> None:
    assert (config.DEFAULTS.dry_run, config.DEFAULTS.act_on) == (False, "unambiguous")
    assert (SHIPPED_POLICY.dry_run, SHIPPED_POLICY.act_on) == (False, "unambiguous")  # fleet.yaml says so too
    # NVIDIA's reset-the-GPU and restart-the-machine Xids, and GCE's host maintenance; nothing else.
    assert {79, 95, 119, 48} & config.UNAMBIGUOUS_XIDS == {79, 95, 119}
    assert not {13, 31, 43, 48, 74} & config.UNAMBIGUOUS_XIDS


def _carried(policy: Policy, *signals: Signal) -> bool:
    before = Record()
    return carried_out(before, decide(before, list(signals), Facts(), 1000.0, policy, OPEN), policy)


@pytest.mark.parametrize(
    ("signals", "acted"),
    [
        ((Signal("xid", 79, at=1.0),), True),  # off the bus: replace the host
        ((Signal("xid", 95, at=1.0),), True),  # uncontained ECC: reset (reboot)
        ((Signal("xid", 119, at=1.0), Signal("xid", 79, at=1.0)), True),
        ((Signal("maintenance"),), True),
        ((Signal("nccl_errors"),), False),  # the job, a NIC or the fabric: a person decides
        ((Signal("preflight"),), False),
        ((Signal("xid", 13, at=1.0),), False),  # an application Xid: the trainer restarts its group
        ((Signal("xid", 48, at=1.0),), False),  # needs analysis
        ((Signal("xid", 31337, at=1.0),), False),  # unknown
        ((Signal("xid", 79, at=1.0), Signal("nccl_errors")), False),  # mixed: ambiguous as a whole
    ],
)
def test_which_decisions_are_carried_out(signals: tuple[Signal, ...], acted: bool) -> None:
    assert _carried(SHIPPED_POLICY, *signals) is acted
    assert _carried(replace(SHIPPED_POLICY, act_on="all"), *signals) is True
    assert _carried(replace(SHIPPED_POLICY, dry_run=True), *signals) is False


def test_a_node_already_out_of_service_is_seen_through() -> None:
    held = Record(phase="quarantined", since=1.0, action="review", reason="nccl_errors")
    decision = decide(held, [], Facts(), 1000.0, SHIPPED_POLICY, OPEN)
    assert decision.record.phase == "held"
    assert carried_out(held, decision, SHIPPED_POLICY)


def test_in_a_cluster_the_xid_node_is_quarantined_and_the_ambiguous_one_only_logged(cluster: Cluster) -> None:
    api, now = cluster.api, cluster.clock.now
    api.nodes = {f"n-{i:02d}": node(f"n-{i:02d}") for i in range(40)}
    api.nodes["n-01"]["status"]["conditions"].append(xid_condition(79, now))
    annotation = node_annotation([Result("allreduce", "fail", "busbw 40 GB/s < 144")], now)
    api.nodes["n-02"]["metadata"]["annotations"].update(annotation or {})
    policy = replace(POLICY, act_on="unambiguous", unhealthy_share_limit=0.5)
    warden = cluster.warden(policy)
    for _ in range(2):
        warden.round()
        cluster.clock.now += 30
    assert (record_of(cluster, "n-01").phase, record_of(cluster, "n-01").action) == ("draining", "replace")
    assert api.nodes["n-01"]["spec"].get("unschedulable") is True
    # n-02's failed preflight: decided and logged each round, nothing written to it.
    assert record_of(cluster, "n-02").phase == "healthy"
    assert WARDEN_PHASE_LABEL not in api.nodes["n-02"]["metadata"]["labels"]
    assert not api.nodes["n-02"]["spec"].get("unschedulable")
    assert not [r for r in cluster.mutations() if "n-02" in r.path]
    assert warden.metrics.commands.get(verb="cordon", carried_out="false") == 2
    assert warden.metrics.commands.get(verb="cordon", carried_out="true") == 1
