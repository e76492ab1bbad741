"""warden.sweep.plan, the pure decision: which idle nodes to check, which sweeps to give up."""

from __future__ import annotations

from collections import Counter
from typing import Any

from warden.policy import Policy
from warden.sweep import ADMIT_WAIT_S, Candidate, SweepJob, plan

NOW = 10_000_000.0
POLICY = Policy(dry_run=False, sweep_max_per_pool=3)
WEEK = POLICY.sweep_every_s


def nodes(count: int, pool: str = "a", last: float | None = NOW - WEEK - 1) -> list[Candidate]:
    return [Candidate(f"{pool}-{i:03d}", pool, True, NOW - 7200, last) for i in range(count)]


def test_never_checked_first_then_the_oldest_and_only_those_due() -> None:
    fleet = nodes(40, last=NOW - WEEK + 60)  # not due yet
    fleet[5] = Candidate("a-005", "a", True, NOW - 7200, None)
    fleet[9] = Candidate("a-009", "a", True, NOW - 7200, NOW - 3 * WEEK)
    fleet[3] = Candidate("a-003", "a", True, NOW - 7200, NOW - 2 * WEEK)
    fleet[4] = Candidate("a-004", "a", True, NOW - 60, None)  # idle for a minute only
    fleet[6] = Candidate("a-006", "a", False, NOW - 7200, None)  # out of service
    fleet[7] = Candidate("a-007", "a", True, None, None)  # a job uses it
    assert plan(fleet, [], {}, {}, POLICY, NOW).start == ["a-005", "a-009"]  # 5% of 40: two at once
    big = fleet + nodes(60, pool="a", last=NOW - WEEK + 60)[40:]  # 60 nodes: three may be out
    assert plan(big, [], {}, {}, POLICY, NOW).start == ["a-005", "a-009", "a-003"]


def test_sweeps_share_the_budget_with_everything_else_out_of_service() -> None:
    fleet = nodes(100)  # 5 may be out, at most 3 sweeps
    assert len(plan(fleet, [], {}, {}, POLICY, NOW).start) == 3
    assert len(plan(fleet, [], {"a": 3}, {}, POLICY, NOW).start) == 2
    assert plan(fleet, [], {"a": 5}, {}, POLICY, NOW).start == []
    running = [SweepJob("a-000", "a", "running", NOW - 60, "j0")]
    decided = plan(fleet, running, {"a": 3}, {}, POLICY, NOW)
    assert (len(decided.start), decided.running) == (1, Counter({"a": 2}))
    # The cluster's cap: 5% of 100 + 20 nodes is 6, four of them already out in pool b.
    mixed = fleet + nodes(20, pool="b", last=NOW)
    assert len(plan(mixed, [], {"b": 4}, {}, POLICY, NOW).start) == 2


def test_a_blocked_suspect_takes_a_sweep_back_and_stops_new_ones() -> None:
    fleet = nodes(100)
    running = [SweepJob(f"a-00{i}", "a", "running", NOW - 600 + i, f"j{i}") for i in range(3)]
    decided = plan(fleet, running, {"a": 2}, {"a": 1}, POLICY, NOW)
    assert [j.node for j in decided.give_up] == ["a-002"]  # the newest
    assert decided.start == []
    assert decided.running == Counter({"a": 2})


def test_preempted_unadmitted_and_finished_sweeps() -> None:
    fleet = nodes(100)
    fleet[1] = Candidate("a-001", "a", True, None, None)  # a job took the node
    jobs = [
        SweepJob("a-001", "a", "waiting", NOW - 60, "preempted"),
        SweepJob("a-002", "a", "waiting", NOW - ADMIT_WAIT_S, "never admitted"),
        SweepJob("a-003", "a", "waiting", NOW - 60, "admitted soon"),
        SweepJob("a-004", "a", "pass", NOW - 900, "passed"),
        SweepJob("a-005", "a", "fail", NOW - 900, "failed"),
        SweepJob("gone", "a", "running", NOW - 60, "node deleted"),
    ]
    decided = plan(fleet, jobs, {}, {}, POLICY, NOW)
    assert [j.name for j in decided.give_up] == ["preempted", "never admitted"]
    assert [j.name for j in decided.finished] == ["passed", "failed"]
    # Still holding budget: the one waiting for admission, the running one, and one new (at most three).
    assert decided.running == Counter({"a": 3})
    assert len(decided.start) == 1
    assert not {"a-001", "a-002", "a-003", "a-004", "a-005"} & set(decided.start)  # not again in the same round


def test_hostile_pods_and_jobs_are_skipped_not_fatal() -> None:
    from warden.deepcheck import failures, job_state

    odd: list[Any] = [None, [], {"status": []}, {"status": {"containerStatuses": [{"state": {"terminated": []}}]}}]
    assert [f.evidence for f in failures(odd)] == ["the check's pod is unreadable"] * 2  # the others say nothing
    terminated = {"exitCode": 1, "message": "{" * 100_000}  # nested past the parser
    bad = {"status": {"containerStatuses": [{"state": {"terminated": terminated}}]}}
    assert failures([bad])[0].evidence == "no readable preflight report"
    assert job_state({"status": {"conditions": ["Failed"]}}) == "waiting"
