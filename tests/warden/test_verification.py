"""Tenant signals ask, Warden decides (issue 27): the service's real code against the local API server.

A tenant's pod can be pinned to another team's node and write what it likes to its termination log,
and a team can post NCCLFailure Events from pods it pinned there. None of it cordons, evicts or
reboots a node any more: it asks Warden to verify, Warden runs its own deep check (its Job, its image,
its namespace) on that node, once, within a per-namespace rate limit and a budget of its own, and only
that check's failure puts the node through the state machine. Inputs are built with the producers'
encoders (preflight's termination message, contract.health), never by hand.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from contract import health
from contract.names import DEEP_CHECK_ANNOTATION as DEEP_CHECK
from preflight.report import Result, termination_message
from tests.warden.fakes import node, pod
from tests.warden.test_kube import POLICY, Cluster, cluster, nccl_event, record_of
from tests.warden.test_sweeps import check_failed, warden
from warden import verify
from warden.deepcheck import KIND_LABEL, failures

__all__ = ["cluster"]  # the fixture

POLICY_V = replace(POLICY, burn_in=False, sweeps=False, unhealthy_share_limit=0.5)
VICTIM, ATTACKER = "team-a", "team-b"


def failing_report(check: str = "gpu-state", gpu: int | None = 1, at: float = 0.0) -> str:
    """What preflight writes to its termination log when a check fails (its own encoder)."""
    message = termination_message([Result(check, "fail", f"GPU {gpu}: 2 uncorrectable ECC errors", ["e"], gpu)], at)
    assert message is not None
    return message


def tenant_preflight_pod(name: str, node_name: str, namespace: str, message: str, finished: str) -> dict[str, Any]:
    """A team's pod pinned (spec.nodeName) to a node, its `preflight` init container failed with `message`."""
    terminated = {"exitCode": 1, "finishedAt": finished, "message": message}
    return pod(
        name,
        node_name,
        gpus=0,
        namespace=namespace,
        metadata={"labels": {"meridian.dev/team": namespace.removeprefix("team-")}},
        status={
            "phase": "Failed",
            "initContainerStatuses": [{"name": "preflight", "state": {"terminated": terminated}}],
        },
    )


def iso(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fleet(c: Cluster, count: int = 20) -> None:
    c.api.nodes = {f"n-{i:02d}": node(f"n-{i:02d}") for i in range(count)}


def verification_jobs(c: Cluster) -> dict[str, dict[str, Any]]:
    return {
        j["metadata"]["labels"]["meridian.dev/deep-check-node"]: j
        for j in c.api.jobs.values()
        if j["metadata"]["labels"].get(KIND_LABEL) == "verify"
    }


def untouched(c: Cluster, name: str) -> None:
    """Not cordoned, not tainted, no record, nothing evicted, nothing asked of Compute Engine."""
    n = c.api.nodes[name]
    assert record_of(c, name).phase == "healthy"
    assert not n["spec"].get("unschedulable")
    assert not n["spec"].get("taints")
    assert not [r for r in c.api.requests if r.path.endswith("/eviction") or r.path == f"/api/v1/nodes/{name}"]
    assert c.gce.requests == []


def test_a_pinned_pods_failing_report_only_asks_and_warden_acts_on_its_own_check(cluster: Cluster) -> None:
    api, clock = cluster.api, cluster.clock
    fleet(cluster)
    victim = pod("train-0", "n-03", namespace=VICTIM)  # the other team's 8-GPU pod
    forged = tenant_preflight_pod("evil-0", "n-03", ATTACKER, failing_report(), iso(clock.now - 30))
    api.pods = [victim, forged]
    w = warden(cluster, POLICY_V)
    w.round()
    untouched(cluster, "n-03")
    assert victim in api.pods
    (job,) = verification_jobs(cluster).values()
    assert job["metadata"]["namespace"] == "warden-sweeps"  # with the sweeps, where Kueue manages Jobs
    assert job["metadata"]["labels"]["meridian.dev/deep-check-node"] == "n-03"
    (check,) = job["spec"]["template"]["spec"]["containers"]
    assert check["image"] == POLICY.probation_image  # Warden's image, Warden's command, not the tenant's
    assert check["command"][:3] == ["preflight", "run", "--deep"]
    assert "nodeName" not in job["spec"]["template"]["spec"]  # the scheduler places it; it never preempts
    assert w.metrics.verifications.get(namespace=ATTACKER, outcome="accepted") == 1
    # Once: the same report, rounds later, asks nothing new (the check still waits for the busy node).
    for _ in range(3):
        clock.now += 30
        w.round()
    assert len(api.jobs) == 1
    assert w.metrics.verifications.get(namespace=ATTACKER, outcome="accepted") == 1
    untouched(cluster, "n-03")
    # Warden's own check passes: nothing happens to the node, and the answered report asks no more.
    job["spec"]["suspend"], job["status"] = False, {"succeeded": 1}
    clock.now += 30
    w.round()
    recorded = health.loads(api.nodes["n-03"]["metadata"]["annotations"][DEEP_CHECK], "test")
    assert (recorded.kind, recorded.verdict) == ("verify", "pass")
    assert api.jobs == {}
    for _ in range(2):
        clock.now += 30
        w.round()
    assert api.jobs == {}
    assert record_of(cluster, "n-03").phase == "healthy"
    assert not api.nodes["n-03"]["spec"].get("unschedulable")


def test_only_warden_s_failing_check_quarantines_and_it_names_the_gpu(cluster: Cluster) -> None:
    api, clock = cluster.api, cluster.clock
    fleet(cluster)
    api.pods = [tenant_preflight_pod("job-0", "n-05", VICTIM, failing_report(gpu=2), iso(clock.now - 30))]
    w = warden(cluster, POLICY_V)
    w.round()
    assert record_of(cluster, "n-05").phase == "healthy"
    (job,) = verification_jobs(cluster).values()
    job["spec"]["suspend"] = False
    ours = failing_report("dcgm-diag", gpu=5, at=clock.now)  # what Warden's own check wrote, via preflight
    check_failed(cluster, job, "n-05", ours)
    clock.now += 30
    w.round()
    recorded = health.loads(api.nodes["n-05"]["metadata"]["annotations"][DEEP_CHECK], "test")
    assert (recorded.kind, recorded.verdict) == ("verify", "fail")
    assert [(f.check, f.gpu) for f in recorded.failures] == [("dcgm-diag", 5)]  # Warden's check's GPU, not the ask's
    assert w.metrics.deep_checks.get(pool="h200-a", kind="verify", verdict="fail") == 1
    clock.now += 30
    w.round()
    record = record_of(cluster, "n-05")
    assert (record.phase, record.action) == ("quarantined", "reboot")
    assert api.nodes["n-05"]["spec"]["unschedulable"] is True


def test_nccl_events_from_pinned_pods_ask_for_a_check_not_a_review(cluster: Cluster) -> None:
    api = cluster.api
    fleet(cluster)
    api.pods = [pod(f"pin-{i}", "n-07", gpus=0, namespace=ATTACKER) for i in range(3)]
    api.events = [nccl_event(f"pin-{i}", "n-07", namespace=ATTACKER) for i in range(3)]
    for event in api.events:
        event["lastTimestamp"] = iso(cluster.clock.now - 60)
    w = warden(cluster, POLICY_V)
    w.round()
    untouched(cluster, "n-07")
    assert list(verification_jobs(cluster)) == ["n-07"]
    assert w.metrics.verifications.get(namespace=ATTACKER, outcome="accepted") == 1
    # Two pods are not enough to ask (policy.nccl_failures, per namespace); an Event dated ahead is ignored.
    api.jobs.clear()
    api.pods = [pod(f"pin-{i}", "n-08", gpus=0, namespace="team-c") for i in range(3)]
    api.events = [nccl_event(f"pin-{i}", "n-08", namespace="team-c") for i in range(3)]
    for event, at in zip(api.events, (-60, -60, 7200), strict=True):
        event["lastTimestamp"] = iso(cluster.clock.now + at)
    w.round()
    assert verification_jobs(cluster) == {}
    assert w.metrics.ignored.get(reason="nccl_future") == 1


def test_a_flood_from_one_namespace_is_rate_limited_and_counted(cluster: Cluster) -> None:
    api, clock = cluster.api, cluster.clock
    fleet(cluster, 40)
    report = failing_report()
    api.pods = [
        tenant_preflight_pod(f"evil-{i}", f"n-{i:02d}", ATTACKER, report, iso(clock.now - 30)) for i in range(12)
    ]
    api.pods.append(tenant_preflight_pod("honest-0", "n-30", "team-c", report, iso(clock.now - 30)))
    w = warden(cluster, POLICY_V)
    w.round()
    assert w.metrics.verifications.get(namespace=ATTACKER, outcome="accepted") == verify.BURST
    assert w.metrics.verifications.get(namespace=ATTACKER, outcome="rate_limited") == 12 - verify.BURST
    assert w.metrics.verifications.get(namespace="team-c", outcome="accepted") == 1  # another team is not starved
    text = w.metrics.render()
    assert 'warden_verification_requests_total{namespace="team-b",outcome="rate_limited"}' in text
    # Their own budget: at most MAX_RUNNING checks at once, whatever was accepted; the repair budget is untouched.
    assert len(verification_jobs(cluster)) == verify.MAX_RUNNING
    assert "n-30" in verification_jobs(cluster)  # slots go round the namespaces: a flood cannot take them all
    assert w.metrics.sweeps_running.get(pool="h200-a") == 0
    assert all(record_of(cluster, n).phase == "healthy" for n in api.nodes)
    # Each report is counted once: later rounds see the same reports and count nothing new.
    for _ in range(3):
        clock.now += 30
        w.round()
    assert w.metrics.verifications.get(namespace=ATTACKER, outcome="rate_limited") == 12 - verify.BURST
    assert len(verification_jobs(cluster)) == verify.MAX_RUNNING


def test_a_real_fault_still_gets_the_whole_repair_budget(cluster: Cluster) -> None:
    from tests.warden.test_kube import xid_condition

    api, clock = cluster.api, cluster.clock
    fleet(cluster, 20)
    api.pods = [
        tenant_preflight_pod(f"evil-{i}", f"n-{i:02d}", ATTACKER, failing_report(), iso(clock.now)) for i in range(10)
    ]
    w = warden(cluster, replace(POLICY_V, unhealthy_share_limit=0.05))  # one node of 20 may be out
    w.round()
    assert verification_jobs(cluster)
    api.nodes["n-19"]["status"]["conditions"].append(xid_condition(95, clock.now))  # Warden's own agent's signal
    w.cache.relist()
    clock.now += 30
    w.round()
    assert record_of(cluster, "n-19").phase == "quarantined"  # acted on as before, verifications or not


def test_the_gpu_index_flows_from_preflight_s_encoder_to_warden_s_record() -> None:
    message = failing_report("gpu-state", gpu=6, at=1_764_400_000.0)
    report = health.load_report(message, "termination message")
    assert (report.check, report.gpu, report.time) == ("gpu-state", 6, 1_764_400_000.0)
    terminated = {"state": {"terminated": {"exitCode": 1, "message": message}}}
    found = failures([{"status": {"containerStatuses": [terminated]}}])
    assert [(f.check, f.gpu) for f in found] == [("gpu-state", 6)]
