"""Warden's policy and state machine driven by a simulated 1,280-node (10,240 H200) cluster."""

from __future__ import annotations

from dataclasses import replace

import pytest

from warden.policy import Policy, Signal
from warden.simsweeps import FleetWeek
from warden.simulate import SimCluster, SimNode
from warden.state import Budget, Facts, Record, decide

POOLS = {"a": 768, "b": 384, "c": 128}  # 1,280 nodes x 8 GPUs
POLICY = Policy(dry_run=False)


def xid(code: int) -> Signal:
    return Signal("xid", code)


def test_every_bucket_is_handled_and_nothing_else_is_touched() -> None:
    sim = SimCluster.build(POOLS, POLICY)
    faults = {
        "a-0001": (13, False),
        "a-0002": (43, False),
        "a-0003": (48, False),
        "b-0004": (79, True),
        "b-0005": (95, False),
        "c-0006": (151, False),
    }
    for name, (code, hardware) in faults.items():
        sim.inject(name, xid(code), needs_new_machine=hardware)
    sim.run(1)
    sim.clear("a-0001")  # the job's pods were restarted: the application fault is gone
    sim.run(120)
    phase = {name: Record.from_annotations(sim.nodes[name].annotations).phase for name in faults}
    touched = {name: dict(sim.nodes[name].touched) for name in faults}
    assert touched["a-0001"] == {"restart_pods": 1, "event": 1}
    assert touched["a-0002"] == {}
    assert phase["a-0003"] == "held"
    assert touched["b-0004"]["replace"] == 1
    assert touched["b-0004"]["report_faulty"] == 1
    assert "reboot" not in touched["b-0004"]
    assert touched["b-0005"]["reboot"] == 1
    assert touched["c-0006"]["reboot"] == 1
    assert {phase[n] for n in ("a-0001", "a-0002", "b-0004", "b-0005", "c-0006")} == {"healthy"}
    untouched = [n for n in sim.nodes.values() if n.name not in faults]
    assert len(untouched) == 1274
    assert not [n.name for n in untouched if n.touched or n.cordoned]


@pytest.mark.scenario
def test_circuit_breaker_holds_under_a_correlated_failure() -> None:
    sim = SimCluster.build(POOLS, POLICY)
    failing = [f"c-{i:04d}" for i in range(38)]  # 30% of pool c
    for name in failing:
        sim.inject(name, xid(79), needs_new_machine=True)
    sim.run(900)  # 858 rounds (25,740 s): two at a time, each replacement waiting 720 s for its host report
    assert sim.max_out_share_seen["c"] <= POLICY.unhealthy_share_limit
    assert sim.blocked_rounds > 0  # it had to hold back
    assert sim.phases()["healthy"] == 1280  # and got through all of them, a few at a time
    assert all(sim.nodes[n].touched["replace"] == 1 for n in failing)
    assert not [n for n in sim.nodes.values() if n.name not in failing and n.touched]


def test_flapping_node_is_held_for_review() -> None:
    sim = SimCluster.build({"a": 128}, POLICY)
    for _ in range(4):
        sim.inject("a-0007", xid(95))
        sim.run(60)
    node = sim.nodes["a-0007"]
    assert Record.from_annotations(node.annotations).phase == "held"
    assert node.touched["reboot"] == 3  # the fourth fault is not remediated again


@pytest.mark.scenario
def test_api_errors_and_restarts_never_repeat_an_action() -> None:
    sim = SimCluster.build(POOLS, POLICY)
    sim.api_error_rate = 0.3  # and every round is a fresh Warden: it knows only what the Nodes say
    names = [f"b-{i:04d}" for i in range(0, 40, 4)]
    for name in names:
        sim.inject(name, xid(62))
    sim.run(400)
    assert all(sim.nodes[n].touched["reboot"] == 1 for n in names)
    assert sim.phases()["healthy"] == 1280


def test_a_lost_reboot_request_is_asked_again_once() -> None:
    record = Record(phase="remediating", since=0.0, action="reboot", reason="xid 62", boot_id="3", remediations=(0.0,))
    waiting = decide(record, [], Facts(boot_id="3"), 60.0, POLICY, Budget(True, True))
    assert waiting.commands == ()
    retry = decide(record, [], Facts(boot_id="3"), POLICY.remediate_timeout_s + 1, POLICY, Budget(True, True))
    assert [c.verb for c in retry.commands] == ["reboot"]
    done = decide(record, [], Facts(boot_id="4"), POLICY.remediate_timeout_s + 1, POLICY, Budget(True, True))
    assert [c.verb for c in done.commands] == ["preflight"]


def test_an_unreadable_record_holds_the_node_for_a_person() -> None:
    assert Record.from_annotations({"meridian.dev/warden": "{not json"}).phase == "held"
    assert Record.from_annotations({"meridian.dev/warden": '{"phase": "exploded"}'}).phase == "held"
    future = Record.from_annotations({"meridian.dev/warden": '{"phase": "draining", "added_later": 1}'})
    assert future.phase == "draining"


def test_a_restart_pods_fault_is_acted_on_once_per_event() -> None:
    record, budget = Record(), Budget(True, True)
    first = decide(record, [Signal("xid", 13, at=100.0)], Facts(), 110.0, POLICY, budget)
    assert [c.verb for c in first.commands] == ["restart_pods", "event"]
    again = decide(first.record, [Signal("xid", 13, at=100.0)], Facts(), 140.0, POLICY, budget)
    assert again.commands == ()  # the same event, still in the agent's condition
    later = decide(first.record, [Signal("xid", 13, at=130.0)], Facts(), 170.0, POLICY, budget)
    assert [c.verb for c in later.commands] == ["restart_pods", "event"]


def test_record_round_trips_through_the_node() -> None:
    record = Record(
        phase="draining", since=12.5, action="replace", reason="xid 79", boot_id="2", remediations=(1.0, 2.0)
    )
    labels, annotations = record.to_annotations()
    assert labels == {"meridian.dev/warden-state": "draining"}
    assert Record.from_annotations(annotations) == record
    assert Record.from_annotations({}) == Record()


def test_a_hundred_joining_nodes_burn_in_a_few_at_a_time_without_blocking_repairs() -> None:
    policy = replace(POLICY, burn_in_max_per_pool=4)
    sim = SimCluster.build({"a": 128}, policy)
    for i in range(100):  # a pool scaled from 128 to 228 at once
        sim.nodes[f"new-{i:03d}"] = SimNode(f"new-{i:03d}", "a", pods=0, joined=True)
    sim.inject("a-0005", xid(95))  # and a fault in service meanwhile
    running = []  # burn-in checks under way after each round
    for step in range(120):
        sim.step()
        running.append(sum(n.joined and n.preflight is not None and n.cordoned for n in sim.nodes.values()))
        if step == 0:
            # Quarantined at once though 100 joining nodes are out of service (the budget is 11): they do
            # not count against the breaker; and every joining node is out of service from the start.
            assert sim.nodes["a-0005"].touched["cordon"] == 1
            assert all(sim.nodes[f"new-{i:03d}"].cordoned for i in range(100))
    assert max(running) == 4
    assert all(n.touched["preflight"] == 1 for n in sim.nodes.values() if n.joined)  # each burned in once
    assert sim.phases()["healthy"] == 228  # all in service, the fault repaired too


@pytest.mark.scenario
def test_a_week_of_sweeps_finds_every_latent_fault_within_the_cadence_and_never_displaces_a_job() -> None:
    """1,280 nodes, jobs at 60% of each pool, 40 latent faults (20 GPUs failing only DCGM, 20 slow NICs
    failing only the multi-node check) present from the start, last checks spread over the past week."""
    week = FleetWeek.build(POOLS, POLICY, step_s=600.0)
    week.sweep_s = 1200.0
    faulty = week.inject_latent(40)
    # Found within the cadence plus the longest wait for the node to be idle long enough.
    bound = POLICY.sweep_every_s + week.max_job_s + POLICY.sweep_idle_s + 2 * 3600
    week.run_for(bound)
    assert sorted(week.found) == sorted(faulty)
    assert all(found <= bound for found in week.found.values())  # seconds from the fault to the failed check
    # A node in service whose jobs follow one another with less than sweep_idle_s between them waits
    # longer: the oldest check seen was 9.9 days old (a cadence of 7); nothing forces a busy node idle.
    assert week.max_check_age <= POLICY.sweep_every_s + 3 * 86400
    assert week.over_budget == 0  # sweeps and remediations together never past the share limit
    assert week.displaced_jobs == 0  # a sweep never takes a node from a job
    assert week.preemptions  # jobs did preempt sweeps ...
    late = week.sim.now - week.max_job_s - POLICY.sweep_idle_s - 2 * week.sweep_s
    for node, when in week.preemptions:  # ... and each was retried once its node was idle again
        if when <= late:
            assert any(n == node and at > when for n, at in week.starts), node
    assert week.sim.phases()["healthy"] == 1280  # every faulty node was replaced and burned in again
