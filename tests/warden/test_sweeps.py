"""Contract tests of burn-in and idle sweeps: the service's real code against the local API server.

Exact requests: the sweep Job (Kueue queue and priority labels, node selector,
tolerations, pod priority, the deep check command), the Node annotation patch
with the check's result, the Job's deletion; a preempted sweep given up and
retried, a failed one quarantining its node, the budget counting sweeps, and a
joining node's burn-in within its pool's bound and outside the breaker.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from contract import health
from contract.names import DEEP_CHECK_ANNOTATION as DEEP_CHECK
from preflight.report import Result, termination_message
from tests.warden.fakes import node, pod
from tests.warden.test_kube import POLICY, Cluster, cluster, record_of, xid_condition
from warden.actions import probation_job_name
from warden.deepcheck import sweep_job_name
from warden.policy import Policy
from warden.service import Warden
from warden.state import Record
from warden.sweeper import Sweeper

__all__ = ["cluster"]  # the fixture

SWEEPS = replace(POLICY, burn_in=False, sweeps=True, sweep_idle_s=600.0, sweep_max_per_pool=4)
JOBS = "/apis/batch/v1/namespaces/warden-sweeps/jobs"  # a namespace Kueue manages; Warden's own is not
DAY = 86400.0


def warden(cluster: Cluster, policy: Policy = SWEEPS) -> Warden:
    w = cluster.warden(policy)
    w.sweeper = Sweeper(w.kube, policy, w.metrics, w.cache.store, list_every_s=0)
    return w


def checked(at: float, verdict: str = "pass") -> dict[str, Any]:
    check = health.DeepCheck(time=at, kind="sweep", verdict=verdict)  # type: ignore[arg-type]
    return {"metadata": {"annotations": {DEEP_CHECK: health.dumps(check)}}}


def pool_of(cluster: Cluster, count: int, prefix: str = "n") -> list[str]:
    names = [f"{prefix}-{i:02d}" for i in range(count)]
    for name in names:
        cluster.api.nodes[name] = node(name, **checked(cluster.clock.now - DAY))  # checked a day ago
    return names


def sweep_jobs(cluster: Cluster) -> dict[str, dict[str, Any]]:
    return {j["metadata"]["labels"]["meridian.dev/deep-check-node"]: j for j in cluster.api.jobs.values()}


def check_failed(cluster: Cluster, job: dict[str, Any], node_name: str, report: str) -> None:
    """A deep check Job failed: its pod on `node_name` ended with `report` as the deep check's termination message."""
    name = job["metadata"]["name"]
    job["status"] = {"failed": 1, "conditions": [{"type": "Failed", "status": "True"}]}
    terminated = {"exitCode": 1, "message": report}
    cluster.api.pods.append(
        pod(
            f"{name}-x",
            node_name,
            namespace="warden-sweeps",
            metadata={"labels": {"job-name": name}},
            status={"containerStatuses": [{"name": "deep-check", "state": {"terminated": terminated}}]},
        )
    )


def due_node_swept(cluster: Cluster, node_fields: dict[str, Any] | None = None) -> tuple[Warden, dict[str, Any]]:
    """39 nodes in service and one due for a sweep; two rounds 601 s apart: the sweep Job for it exists."""
    pool_of(cluster, 39)
    cluster.api.nodes["due"] = node("due", **(node_fields or {}))
    w = warden(cluster)
    w.round()
    cluster.clock.now += 601
    w.round()
    return w, sweep_jobs(cluster)["due"]


def test_an_idle_node_due_for_a_check_gets_a_low_priority_sweep_pinned_to_it(cluster: Cluster) -> None:
    api, clock = cluster.api, cluster.clock
    pool_of(cluster, 38)
    api.nodes["due"] = node("due")  # never checked
    api.nodes["busy"] = node("busy")  # never checked, but a job uses its GPUs
    queued = {"key": "cloud.google.com/gke-queued", "value": "true", "effect": "NoSchedule"}
    api.nodes["flex"] = node("flex", spec={"taints": [queued]})  # flex-start: burned in, never swept
    api.pods = [pod("train-0", "busy"), pod("gib-x", "due", gpus=0, daemonset=True)]
    w = warden(cluster)
    w.round()
    assert api.jobs == {}  # idle only since now: not yet sweep_idle_s
    clock.now += 601
    mark = len(api.requests)
    w.round()
    (create,) = cluster.mutations(mark)
    assert (create.method, create.path, create.auth) == ("POST", JOBS, "Bearer warden-test-token")
    job = create.body
    assert job["metadata"]["name"] == sweep_job_name("due", clock.now)
    assert job["metadata"]["labels"] == {
        "app.kubernetes.io/name": "warden-sweep",
        "app.kubernetes.io/part-of": "meridian",
        "meridian.dev/deep-check-node": "due",
        "cloud.google.com/gke-nodepool": "h200-a",
        "kueue.x-k8s.io/queue-name": "warden-sweep",
        "kueue.x-k8s.io/priority-class": "warden-sweep",
        "meridian.dev/deep-check-kind": "sweep",
    }
    spec = job["spec"]
    assert (spec["suspend"], spec["backoffLimit"]) == (True, 0)
    assert spec["activeDeadlineSeconds"] == 7200
    assert spec["podFailurePolicy"] == {
        "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
    }
    pod_spec = spec["template"]["spec"]
    assert pod_spec["nodeSelector"] == {"kubernetes.io/hostname": "due", "cloud.google.com/gke-nodepool": "h200-a"}
    assert "nodeName" not in pod_spec  # the scheduler places it, so a cordon or a job's pod keeps it off
    assert pod_spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "cloud.google.com/gke-queued", "operator": "Exists", "effect": "NoSchedule"},
    ]
    assert pod_spec["priorityClassName"] == "warden-sweep"
    (deep,) = pod_spec["containers"]
    assert deep["command"] == [
        "preflight",
        "run",
        "--deep",
        "--level",
        "2",
        "--termination-log",
        "/dev/termination-log",
    ]
    assert deep["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert deep["image"] == POLICY.probation_image
    assert w.metrics.sweeps_running.get(pool="h200-a") == 1
    # Running: nothing more is asked, and the busy node is never swept.
    clock.now += 30
    mark = len(api.requests)
    w.round()
    assert cluster.mutations(mark) == []


def test_sweeps_live_where_kueue_manages_jobs_and_wardens_own_pods_never_make_a_node_busy(cluster: Cluster) -> None:
    """Kueue ignores a Job in `warden` (not a namespace it manages): Warden creates, lists and deletes its
    sweeps in `warden-sweeps`. A Job there with the sweep's labels is not Warden's to read as a sweep; its
    own GPU pods (a probation Job in `warden`, a check in `warden-sweeps`) leave their node idle."""
    api, clock = cluster.api, cluster.clock
    pool_of(cluster, 57)  # 60 nodes: three may be out at once (5%)
    for name in ("due", "probation", "checked"):
        api.nodes[name] = node(name)  # never checked
    api.pods = [pod("probe", "probation", namespace="warden"), pod("check", "checked", namespace="warden-sweeps")]
    stray = {"labels": {"app.kubernetes.io/name": "warden-sweep", "meridian.dev/deep-check-node": "due"}}
    api.jobs["stray"] = {"metadata": {"name": "stray", "namespace": "warden", **stray}, "spec": {"suspend": True}}
    w = warden(cluster)
    w.round()
    clock.now += 601
    mark = len(api.requests)
    w.round()
    created = {m.body["metadata"]["labels"]["meridian.dev/deep-check-node"]: m for m in cluster.mutations(mark)}
    assert sorted(created) == ["checked", "due", "probation"]  # a stray in `warden` holds no node
    assert {(m.method, m.path, m.body["metadata"]["namespace"]) for m in created.values()} == {
        ("POST", JOBS, "warden-sweeps")
    }
    assert "stray" in api.jobs  # left alone: not in the sweeps' namespace


def test_a_passed_sweep_is_recorded_on_the_node_and_its_job_deleted(cluster: Cluster) -> None:
    api, clock = cluster.api, cluster.clock
    w, job = due_node_swept(cluster, checked(clock.now - 8 * DAY))  # last checked 8 days ago
    job["spec"]["suspend"] = False
    job["status"] = {"succeeded": 1}
    clock.now += 900
    mark = len(api.requests)
    w.round()
    patch, delete = cluster.mutations(mark)
    assert (patch.method, patch.path, patch.content_type) == (
        "PATCH",
        "/api/v1/nodes/due",
        "application/merge-patch+json",
    )
    value = patch.body["metadata"]["annotations"][DEEP_CHECK]
    assert list(patch.body) == ["metadata"]
    assert list(patch.body["metadata"]) == ["annotations"]
    assert health.loads(value, "test") == health.DeepCheck(time=clock.now, kind="sweep", verdict="pass", level=2)
    assert (delete.method, delete.path, delete.query) == (
        "DELETE",
        f"{JOBS}/{job['metadata']['name']}",
        {"propagationPolicy": "Background"},
    )
    assert w.metrics.deep_checks.get(pool="h200-a", kind="sweep", verdict="pass") == 1
    assert 'warden_deep_checks_total{kind="sweep",pool="h200-a",verdict="pass"} 1.0' in w.metrics.render()
    clock.now += 30
    w.round()
    assert api.jobs == {}  # checked now: not due for sweep_every_s


def test_a_failed_sweep_records_what_failed_and_the_policy_acts_on_it(cluster: Cluster) -> None:
    api, clock = cluster.api, cluster.clock
    w, job = due_node_swept(cluster)
    # What Warden's deep check writes: preflight's own encoder, never a hand-written report.
    report = termination_message([Result("dcgm-diag", "fail", "Memory test failed", ["GPU 3: memory fail"], 3)], 1.0)
    assert report is not None
    check_failed(cluster, job, "due", report)
    clock.now += 900
    w.round()
    check = health.loads(api.nodes["due"]["metadata"]["annotations"][DEEP_CHECK], "test")
    assert (check.kind, check.verdict) == ("sweep", "fail")
    assert check.failures == (health.Failure(check="dcgm-diag", gpu=3, evidence="Memory test failed"),)
    assert w.metrics.deep_checks.get(pool="h200-a", kind="sweep", verdict="fail") == 1
    api.pods = []
    clock.now += 30
    w.round()  # the recorded failure is a preflight signal: quarantined (cordoned) for a reboot
    record = record_of(cluster, "due")
    assert (record.phase, record.action) == ("quarantined", "reboot")
    assert record.reason == "preflight"  # the signal's kind: the check's own detail stays in the annotation
    assert api.nodes["due"]["spec"]["unschedulable"] is True


def test_a_sweep_preempted_by_a_job_is_given_up_not_failed_and_retried_later(cluster: Cluster) -> None:
    api, clock = cluster.api, cluster.clock
    w, job = due_node_swept(cluster)
    job["spec"]["suspend"], job["status"] = False, {"active": 1, "ready": 1}
    clock.now += 30
    w.round()
    assert len(api.jobs) == 1  # running
    # A team's job takes the node: Kueue suspends the sweep (its pods go), the job's pod runs there.
    job["spec"]["suspend"], job["status"] = True, {}
    api.pods = [pod("train-0", "due")]
    clock.now += 30
    mark = len(api.requests)
    w.round()
    (delete,) = cluster.mutations(mark)
    assert (delete.method, delete.path) == ("DELETE", f"{JOBS}/{job['metadata']['name']}")
    assert DEEP_CHECK not in api.nodes["due"]["metadata"]["annotations"]  # not a check: nothing recorded
    assert w.metrics.deep_checks.get(pool="h200-a", kind="sweep", verdict="fail") == 0
    assert record_of(cluster, "due").phase == "healthy"
    # The job ends; sweep_idle_s later the node is swept again.
    api.pods = []
    clock.now += 30
    w.round()
    assert api.jobs == {}
    clock.now += 601
    w.round()
    assert list(sweep_jobs(cluster)) == ["due"]


def test_sweeps_count_against_the_pool_budget_and_give_way_to_a_fault(cluster: Cluster) -> None:
    api, clock = cluster.api, cluster.clock
    for i in range(40):  # 5% of 40: two nodes out of service at once
        api.nodes[f"n-{i:02d}"] = node(f"n-{i:02d}")
    labels, annotations = Record(
        phase="held", since=clock.now, action="review", reason="a person looks"
    ).to_annotations()
    api.nodes["n-00"]["metadata"]["labels"].update(labels)
    api.nodes["n-00"]["metadata"]["annotations"].update(annotations)
    w = warden(cluster)
    w.round()
    clock.now += 601
    w.round()
    assert len(api.jobs) == 1  # one held + one sweep = the budget, though four sweeps may run per pool
    clock.now += 30
    w.round()
    assert len(api.jobs) == 1
    (swept,) = sweep_jobs(cluster)
    # A fault on another node: the breaker holds it, so the sweep is given up and the fault goes first.
    other = "n-39" if swept != "n-39" else "n-38"
    api.nodes[other]["status"]["conditions"].append(xid_condition(95, clock.now))
    w.cache.relist()  # as the watch would have brought it
    clock.now += 30
    w.round()
    assert record_of(cluster, other).phase == "suspect"
    assert api.jobs == {}
    clock.now += 30
    w.round()
    assert record_of(cluster, other).phase == "quarantined"
    assert api.jobs == {}  # and no sweep takes its place while the budget is used


def test_dry_run_plans_sweeps_and_writes_nothing(cluster: Cluster) -> None:
    pool_of(cluster, 39)
    cluster.api.nodes["due"] = node("due")
    w = warden(cluster, replace(SWEEPS, dry_run=True))
    w.round()
    cluster.clock.now += 601
    w.round()
    assert cluster.mutations() == []


def _joined(cluster: Cluster, name: str) -> dict[str, Any]:
    created = datetime.fromtimestamp(cluster.clock.now - 120, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return node(name, metadata={"creationTimestamp": created})


def test_joining_nodes_burn_in_within_the_pool_bound_and_outside_the_breaker(cluster: Cluster) -> None:
    api, clock = cluster.api, cluster.clock
    api.nodes = {f"n-{i}": node(f"n-{i}") for i in range(3)}  # older nodes: no records, swept, not burned in
    for name in ("new-a", "new-b"):
        api.nodes[name] = _joined(cluster, name)
    policy = replace(POLICY, burn_in=True, sweeps=False, burn_in_max_per_pool=1)
    w = warden(cluster, policy)
    w.round()
    a, b = record_of(cluster, "new-a"), record_of(cluster, "new-b")
    assert (a.phase, a.burn_in, b.phase, b.burn_in) == ("probation", True, "probation", True)
    assert [api.nodes[n]["spec"]["unschedulable"] for n in ("new-a", "new-b")] == [True, True]
    assert list(api.jobs) == [probation_job_name("new-a", a.since)]  # one burn-in at a time in the pool
    assert [record_of(cluster, f"n-{i}").phase for i in range(3)] == ["healthy"] * 3
    # Two nodes out of service in a pool of five, over its budget of one: burn-ins do not count, a fault does.
    api.nodes["n-1"]["status"]["conditions"].append(xid_condition(95, clock.now))
    w.cache.relist()
    clock.now += 30
    w.round()
    assert record_of(cluster, "n-1").phase == "quarantined"
    assert len(api.jobs) == 1
    # new-a passes: recorded as a burn-in, returned; new-b's burn-in starts.
    job = api.jobs[probation_job_name("new-a", a.since)]
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][:5] == [
        "preflight",
        "run",
        "--deep",
        "--level",
        "3",
    ]
    job["status"] = {"succeeded": 1}
    clock.now += 30
    w.round()
    assert (record_of(cluster, "new-a").phase, record_of(cluster, "new-a").burn_in) == ("healthy", False)
    check = health.loads(api.nodes["new-a"]["metadata"]["annotations"][DEEP_CHECK], "test")
    assert (check.kind, check.verdict, check.level) == ("burn_in", "pass", 3)
    clock.now += 30
    w.round()
    assert probation_job_name("new-b", b.since) in api.jobs


def test_a_failed_burn_in_takes_the_policy_action_for_a_failed_preflight(cluster: Cluster) -> None:
    api, clock = cluster.api, cluster.clock
    api.nodes = {"new": _joined(cluster, "new")}
    w = warden(cluster, replace(POLICY, burn_in=True, sweeps=False))
    w.round()
    record = record_of(cluster, "new")
    api.jobs[probation_job_name("new", record.since)]["status"] = {"failed": 1}
    clock.now += 30
    w.round()
    record = record_of(cluster, "new")
    assert (record.phase, record.action, record.burn_in) == ("quarantined", "reboot", True)
    check = health.loads(api.nodes["new"]["metadata"]["annotations"][DEEP_CHECK], "test")
    assert (check.kind, check.verdict, check.failures[0].check) == ("burn_in", "fail", "deep_check")
    assert w.metrics.deep_checks.get(pool="h200-a", kind="burn_in", verdict="fail") == 1
