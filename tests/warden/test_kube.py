"""Contract tests of Warden's Kubernetes side: exact requests against a local API server.

The service runs its real code (cache, observation, state machine, actuator,
leader election) against tests/warden/fakes.py; Compute Engine calls go to
a second local server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from contract import health
from contract import warden as config
from contract.names import DEEP_CHECK_ANNOTATION as DEEP_CHECK
from contract.names import NODE_EVENT_ANNOTATION
from contract.names import WARDEN_PHASE_LABEL as PHASE_LABEL
from contract.names import WARDEN_RECORD_ANNOTATION as RECORD
from contract.registry import Thresholds
from gkr import health as gkr_health
from preflight.report import Result, node_annotation
from tests.warden.fakes import ApiState, ComputeState, FakeApiServer, FakeCompute, Request, node, pod, serving
from warden.actions import TAINT, Actuator, probation_job_name
from warden.cli import main
from warden.gce import Compute
from warden.kube import MERGE, STRATEGIC, Kube, client
from warden.leader import Elector
from warden.metrics import WardenMetrics
from warden.nodecache import NodeCache
from warden.policy import Policy
from warden.ratelimit import TokenBucket
from warden.service import Warden
from warden.state import Record

TOKEN = "Bearer warden-test-token"
POLICY = Policy(
    dry_run=False,
    act_on="all",  # these tests follow every action to its end; the new fleet's default has its own tests
    probation_image="registry.example/trainer@sha256:" + "a" * 64,
    pools={
        "h200-a": Thresholds(
            gpus=8, min_tflops=600.0, min_busbw_one_node_gbps=368.0, min_busbw_many_nodes_gbps=256.0, rdma=True
        )
    },
)


@dataclass
class Clock:
    now: float = 1_764_400_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Cluster:
    api: ApiState
    gce: ComputeState
    url: str
    gce_url: str
    clock: Clock = field(default_factory=Clock)

    def kube(self, qps: float = 1000, token: str = "warden-test-token", timeout: float = 30, guard: Any = None) -> Kube:
        from kubernetes import client as k8s

        configuration = k8s.Configuration(host=self.url)
        configuration.api_key = {"BearerToken": token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
        configuration.retries = False  # as warden.kube.client() sets it
        return Kube(k8s.ApiClient(configuration), TokenBucket(qps, 100), timeout=timeout, guard=guard)

    def warden(self, policy: Policy = POLICY) -> Warden:
        """A freshly started Warden: nothing in memory, everything read from the cluster."""
        kube, metrics = self.kube(), WardenMetrics()
        cache = NodeCache(kube, clock=self.clock)
        cache.relist()
        compute = Compute(token=lambda: "ya29.test", base=f"{self.gce_url}/compute/v1")
        actuator = Actuator(kube, compute, policy, cache, metrics, clock=self.clock)
        return Warden(kube, policy, cache, actuator, metrics, clock=self.clock)

    def mutations(self, since: int = 0) -> list[Request]:
        return [r for r in self.api.requests[since:] if r.method != "GET"]


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    api, gce = ApiState(), ComputeState()
    with serving(FakeApiServer, api) as url, serving(FakeCompute, gce) as gce_url:
        yield Cluster(api, gce, url, gce_url)


def nccl_event(pod_name: str, host: str, namespace: str = "research", count: int = 1, **extra: Any) -> dict[str, Any]:
    """An NCCLFailure Event as the trainer posts it (trainer.ft.kube_events.event_body)."""
    event = {
        "metadata": {"name": f"{pod_name}.nccl-1", "namespace": namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "namespace": namespace},
        "reason": "NCCLFailure",
        "source": {"component": "meridian-trainer", "host": host},
        "count": count,
        "lastTimestamp": "2025-11-29T07:59:00Z",
    }
    return {**event, **extra}


def xid_condition(code: int, at: float) -> dict[str, Any]:
    return {"type": "GPUXid", "status": "True", "reason": "XidLogged", "message": f"{code}@{int(at)}"}


def record_of(cluster: Cluster, name: str) -> Record:
    return Record.from_annotations(cluster.api.nodes[name]["metadata"]["annotations"])


def test_an_xid_79_node_goes_through_every_phase_with_exact_requests(cluster: Cluster) -> None:
    api, clock = cluster.api, cluster.clock
    bad = "gke-meridian-us-central1-h200-a-0001"
    api.nodes = {
        f"gke-meridian-us-central1-h200-a-{i:04d}": node(f"gke-meridian-us-central1-h200-a-{i:04d}") for i in range(40)
    }
    api.nodes["cpu-0"] = node("cpu-0", pool="system", gpus=0)
    api.nodes[bad]["status"]["conditions"].append(xid_condition(79, clock.now - 5))
    api.pods = [pod("train-worker-3", bad), pod("gib-installer-x", bad, gpus=0, daemonset=True)]
    cluster.gce.groups[bad] = "gke-meridian-us-central1-h200-a-grp"
    warden = cluster.warden()

    # Round 1: suspect -> quarantined at once (the budget allows one of 40): record, cordon + taint, events.
    mark = len(api.requests)
    warden.round()
    record_patch, transition, cordon, action = cluster.mutations(mark)
    events = [transition, action]
    assert (record_patch.method, record_patch.path, record_patch.content_type) == (
        "PATCH",
        f"/api/v1/nodes/{bad}",
        MERGE,
    )
    assert record_patch.auth == TOKEN
    assert record_patch.body["metadata"]["labels"] == {PHASE_LABEL: "quarantined"}
    written = json.loads(record_patch.body["metadata"]["annotations"][RECORD])
    assert (written["phase"], written["action"], written["reason"]) == ("quarantined", "replace", "xid 79")
    # The taint list is replaced whole, so the patch only applies to the Node it was computed from.
    # (the version the record patch returned: the cordon was the next write, which bumped it once more)
    assert cordon.body == {
        "metadata": {"resourceVersion": str(int(api.nodes[bad]["metadata"]["resourceVersion"]) - 1)},
        "spec": {"unschedulable": True, "taints": [TAINT]},
    }
    assert [e.body["reason"] for e in events] == ["WardenQuarantined", "WardenAction"]
    assert events[0].path == "/api/v1/namespaces/default/events"
    assert events[0].body["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": bad, "uid": f"uid-{bad}"}
    # What gkr health counts comes from each Event's typed record, through the contract's decoder.
    assert [health.load_event(e.body["metadata"]["annotations"][NODE_EVENT_ANNOTATION], "e") for e in events] == [
        health.NodeEvent(
            change="left_healthy", before="healthy", after="quarantined", faults=(health.Fault(kind="xid", code=79),)
        ),
        health.NodeEvent(change="other"),
    ]
    assert [gkr_health.event_kinds(e.body) for e in events] == [["xid:79"], []]
    assert warden.metrics.transitions.get(from_phase="healthy", to_phase="quarantined") == 1
    touched = {r.path for r in cluster.mutations(mark) if r.path.startswith("/api/v1/nodes/")}
    assert touched == {f"/api/v1/nodes/{bad}"}  # no healthy node touched

    # Round 2: draining: only the training pod is evicted, through the Eviction API, with the grace period.
    clock.now += 30
    mark = len(api.requests)
    warden.round()
    evictions = [r for r in cluster.mutations(mark) if r.path.endswith("/eviction")]
    assert [r.path for r in evictions] == ["/api/v1/namespaces/research/pods/train-worker-3/eviction"]
    assert evictions[0].body["deleteOptions"] == {"gracePeriodSeconds": 600}
    assert evictions[0].body["kind"] == "Eviction"

    # Round 3: drained -> remediating: report the host; once its operation is DONE (the next round here),
    # recreate the instance in its group (the order in detail: test_gce.py).
    clock.now += 30
    warden.round()
    assert record_of(cluster, bad).phase == "remediating"
    assert record_of(cluster, bad).report == "operation-1"
    cluster.gce.operations["operation-1"]["status"] = "DONE"
    clock.now += 30
    warden.round()
    posts = [(r.method, r.path.rsplit("/", 1)[1]) for r in cluster.gce.requests]
    assert posts == [
        ("POST", "reportHostAsFaulty"),
        ("GET", "operation-1"),
        ("GET", bad),
        ("POST", "recreateInstances"),
    ]
    assert cluster.gce.requests[3].path.endswith(
        "/zones/us-central1-b/instanceGroupManagers/gke-meridian-us-central1-h200-a-grp/recreateInstances"
    )
    assert cluster.gce.requests[3].body == {"instances": [f"zones/us-central1-b/instances/{bad}"]}

    # A restarted Warden mid-remediation asks nothing again.
    clock.now += 30
    cluster.warden().round()
    assert len(cluster.gce.requests) == 4

    # The new machine registers under the same name with a new boot id: probation Job pinned to it.
    api.nodes[bad]["status"]["nodeInfo"]["bootID"] = "boot-2"
    api.nodes[bad]["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    warden = cluster.warden()
    clock.now += 30
    warden.round()
    record = record_of(cluster, bad)
    assert record.phase == "probation"
    job = api.jobs[probation_job_name(bad, record.since)]
    spec = job["spec"]["template"]["spec"]
    assert spec["nodeName"] == bad
    assert spec["tolerations"] == [{"operator": "Exists"}]
    # The quick checks first, then the burn-in deep check (DCGM level 3), both with the node's GPUs.
    assert spec["initContainers"][0]["command"] == [
        "preflight",
        "run",
        "--expect-gpus=8",
        "--min-tflops=600",
        "--min-busbw-gbps=368",
    ]
    assert spec["containers"][0]["command"] == [
        "preflight",
        "run",
        "--deep",
        "--level",
        "3",
        "--termination-log",
        "/dev/termination-log",
    ]
    assert spec["initContainers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert job["spec"]["activeDeadlineSeconds"] == POLICY.deep_check_timeout_s

    # Preflight passes: uncordon, taint removed, old preflight failure annotation cleared.
    job["status"] = {"succeeded": 1}
    clock.now += 30
    mark = len(api.requests)
    warden.round()
    assert record_of(cluster, bad).phase == "healthy"
    # The burn-in's result goes onto the Node with the record, in the same patch.
    check = health.loads(api.nodes[bad]["metadata"]["annotations"][DEEP_CHECK], "test")
    assert (check.kind, check.verdict, check.level, check.time) == ("burn_in", "pass", 3, clock.now)
    assert warden.metrics.deep_checks.get(pool="h200-a", kind="burn_in", verdict="pass") == 1
    uncordon = [r for r in cluster.mutations(mark) if r.body and "spec" in r.body]
    assert uncordon[0].body == {
        "metadata": {
            "annotations": {"meridian.dev/preflight-failure": None},
            "resourceVersion": str(int(api.nodes[bad]["metadata"]["resourceVersion"]) - 1),
        },
        "spec": {"unschedulable": False, "taints": []},
    }
    assert api.nodes[bad]["metadata"]["labels"][PHASE_LABEL] == "healthy"
    assert not [r for r in api.requests if r.path.startswith("/api/v1/nodes/cpu-0") and r.method != "GET"]


def test_dry_run_changes_nothing_and_counts_decisions(cluster: Cluster) -> None:
    cluster.api.nodes = {f"n-{i}": node(f"n-{i}") for i in range(40)}
    cluster.api.nodes["n-3"]["status"]["conditions"].append(xid_condition(95, cluster.clock.now))
    warden = cluster.warden(replace(POLICY, dry_run=True))
    for _ in range(3):
        warden.round()
        cluster.clock.now += 30
    assert cluster.mutations() == []
    assert cluster.gce.requests == []
    assert warden.metrics.commands.get(verb="cordon", carried_out="false") == 3
    assert 'warden_commands_total{carried_out="false",verb="cordon"} 3.0' in warden.metrics.render()


def test_a_pdb_refusal_is_retried_and_api_errors_are_repaired_next_round(cluster: Cluster) -> None:
    api = cluster.api
    api.nodes = {f"n-{i}": node(f"n-{i}") for i in range(40)}
    api.nodes["n-1"]["status"]["conditions"].append(xid_condition(95, cluster.clock.now))
    api.pods = [pod("guarded", "n-1")]
    api.pdb_blocked = {"guarded"}
    warden = cluster.warden()
    warden.actuator.event = lambda *args: None  # type: ignore[method-assign]
    original, failures = warden.kube.patch_node, [500]

    def fail_cordon(name: str, patch: dict[str, Any]) -> dict[str, Any]:
        if "spec" in patch and failures:
            api.fail_next.append(failures.pop())  # the record is written, then the first cordon fails
        return original(name, patch)

    warden.kube.patch_node = fail_cordon  # type: ignore[method-assign]
    warden.round()
    assert record_of(cluster, "n-1").phase == "quarantined"
    assert not api.nodes["n-1"]["spec"].get("unschedulable")
    assert warden.metrics.api_errors.get() == 1
    cluster.clock.now += 30
    warden.round()  # quarantined -> draining, and the missing cordon is re-asserted
    assert api.nodes["n-1"]["spec"]["unschedulable"] is True
    for _ in range(3):
        cluster.clock.now += 30
        warden.round()
    evictions = [r for r in api.requests if r.path.endswith("/guarded/eviction")]
    assert len(evictions) >= 3  # refused (HTTP 429) and asked again every round
    assert record_of(cluster, "n-1").phase == "draining"


def test_signals_beyond_xids(cluster: Cluster) -> None:
    api, now = cluster.api, cluster.clock.now
    api.nodes = {f"n-{i:02d}": node(f"n-{i:02d}") for i in range(60)}
    api.nodes["n-01"]["status"]["allocatable"]["nvidia.com/gpu"] = "7"
    annotation = node_annotation([Result("allreduce", "fail", "busbw 40 GB/s < 144")], 1_764_403_200.0)
    api.nodes["n-02"]["metadata"]["annotations"].update(annotation or {})  # `preflight run --annotate`
    api.nodes["n-03"]["metadata"]["labels"]["cloud.google.com/scheduled-maintenance-time"] = str(int(now + 1800))
    api.nodes["n-04"]["metadata"]["labels"]["cloud.google.com/scheduled-maintenance-time"] = str(int(now + 86400))
    # Three pods of n-05 report; n-06's one pod reports often (count is the reporter's word: once).
    api.pods = [pod(f"w-{i}", "n-05") for i in range(3)] + [pod("w-6", "n-06")]
    api.events = [nccl_event(f"w-{i}", "n-05") for i in range(3)] + [nccl_event("w-6", "n-06", count=5)]
    api.nodes["n-07"]["metadata"]["labels"]["meridian.dev/warden-opt-out"] = "true"
    api.nodes["n-07"]["status"]["conditions"].append(xid_condition(79, now))
    policy = replace(POLICY, unhealthy_share_limit=0.5)
    cluster.clock.now = 1_764_403_200.0  # 2025-11-29T08:00:00Z
    cluster.warden(policy).round()
    phases = {name: record_of(cluster, name) for name in ("n-01", "n-02", "n-03", "n-04", "n-05", "n-06", "n-07")}
    assert {n: (r.phase, r.action) for n, r in phases.items()} == {
        "n-01": ("quarantined", "reboot"),
        "n-02": ("quarantined", "reboot"),
        "n-03": ("quarantined", "reboot"),  # maintenance within the lead time
        "n-04": ("healthy", "none"),  # maintenance tomorrow: not yet
        "n-05": ("healthy", "none"),  # 3 pods with NCCL failures only ask for a check (test_verification.py)
        "n-06": ("healthy", "none"),  # 1 pod is below the threshold, however many times it says so
        "n-07": ("healthy", "none"),  # opted out
    }
    events = {"fieldSelector": "reason=NCCLFailure", "limit": "500"}  # a page at a time (issue 39)
    assert any(r.path == "/api/v1/events" and r.query == events for r in api.requests)


def test_maintenance_reboot_performs_the_pending_host_maintenance(cluster: Cluster) -> None:
    api = cluster.api
    api.nodes = {f"n-{i:02d}": node(f"n-{i:02d}") for i in range(40)}
    api.nodes["n-03"]["metadata"]["labels"]["cloud.google.com/scheduled-maintenance-time"] = str(
        int(cluster.clock.now + 600)
    )
    warden = cluster.warden()
    for _ in range(4):
        warden.round()
        cluster.clock.now += 30
    assert [r.path.rsplit("/", 1)[1] for r in cluster.gce.requests] == ["performMaintenance"]


def test_watch_keeps_the_cache_current_and_a_410_relists(cluster: Cluster) -> None:
    api = cluster.api
    api.page_size = 2
    api.nodes = {f"n-{i}": node(f"n-{i}") for i in range(5)}
    cache = NodeCache(cluster.kube(), clock=cluster.clock)
    cache.relist()
    lists = [r for r in api.requests if r.path == "/api/v1/nodes"]
    assert [r.query.get("continue") for r in lists] == [None, "2", "4"]
    assert all(r.query["limit"] == "500" for r in lists)
    changed = node("n-1", boot="boot-9")
    api.watch_events = [
        {"type": "MODIFIED", "object": api.bump(changed)},
        {"type": "DELETED", "object": node("n-4")},
        {"type": "ADDED", "object": api.bump(node("n-9"))},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "777"}}},
    ]
    cache.sync_once()
    watch = next(r for r in api.requests if r.query.get("watch") == "true")
    assert watch.query["allowWatchBookmarks"] == "true"
    assert watch.query["resourceVersion"] == str(api.version - 2)
    names = sorted(n["metadata"]["name"] for n in cache.snapshot())
    assert names == ["n-0", "n-1", "n-2", "n-3", "n-9"]
    assert cache.get("n-1")["status"]["nodeInfo"]["bootID"] == "boot-9"  # type: ignore[index]
    assert cache.resource_version == "777"
    api.nodes["n-5"] = node("n-5")
    api.watch_events = [{"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}]
    cache.sync_once()
    assert cache.relists == 2
    assert cache.get("n-5") is not None
    cluster.clock.now += 301
    cache.sync_once()
    assert cache.relists == 3  # resync


def test_leader_election_one_leader_takeover_and_a_lost_race(cluster: Cluster) -> None:
    a = Elector(cluster.kube(), "warden", "warden-a", clock=cluster.clock)
    b = Elector(cluster.kube(), "warden", "warden-b", clock=cluster.clock)
    assert a.step()
    assert not b.step()
    create = next(r for r in cluster.api.requests if r.method == "POST")
    assert create.path == "/apis/coordination.k8s.io/v1/namespaces/warden/leases"
    assert create.body["spec"]["holderIdentity"] == "warden-a"
    assert create.body["spec"]["leaseDurationSeconds"] == 15
    cluster.clock.now += 10
    assert a.step()
    assert not b.step()
    renew = [r for r in cluster.api.requests if r.method == "PUT"][-1]
    assert renew.path == "/apis/coordination.k8s.io/v1/namespaces/warden/leases/warden"
    assert renew.body["metadata"]["resourceVersion"]
    cluster.clock.now += 14
    assert not b.step()  # 14 s since b last saw a renewal: not expired yet
    cluster.clock.now += 2
    assert b.step()  # a stopped renewing (it died): b takes over
    lease = cluster.api.leases["warden"]["spec"]
    assert lease["holderIdentity"] == "warden-b"
    assert lease["leaseTransitions"] == 1
    assert not a.step()  # a comes back and stays standby
    # A stale write loses: the server refuses an outdated resourceVersion.
    stale = dict(cluster.api.leases["warden"], metadata={"name": "warden", "resourceVersion": "1"})
    kube = cluster.kube()
    with pytest.raises(Exception, match="409"):
        kube.replace("/apis/coordination.k8s.io/v1/namespaces/warden/leases/warden", stale)


def test_token_bucket_bounds_the_request_rate() -> None:
    clock = Clock(0.0)
    waits: list[float] = []

    def sleep(s: float) -> None:
        waits.append(s)
        clock.now += s

    bucket = TokenBucket(10, 5, clock=clock, sleep=sleep)
    for _ in range(25):
        bucket.take()
    assert len(waits) == 20
    assert sum(waits) == pytest.approx(2.0)


def test_every_request_passes_the_limiter(cluster: Cluster) -> None:
    cluster.api.nodes = {"n-0": node("n-0")}
    kube = cluster.kube()
    taken: list[float] = []

    def take() -> float:
        taken.append(1.0)
        return 0.0

    kube.limiter.take = take  # type: ignore[method-assign]
    kube.list_nodes()
    kube.patch_node("n-0", {"metadata": {"labels": {"a": "b"}}})
    kube.patch_node_status("n-0", {"status": {"conditions": [{"type": "GPUXid", "status": "False"}]}})
    assert len(taken) == 3
    assert [r.content_type for r in cluster.api.requests[1:]] == [MERGE, STRATEGIC]


def write_kubeconfig(tmp_path: Path, url: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "warden", "user": {"token": "warden-test-token"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "warden"}}],
        "current-context": "fake",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def test_serve_once_through_the_cli_and_a_kubeconfig(cluster: Cluster, tmp_path: Path) -> None:
    cluster.api.nodes = {f"n-{i}": node(f"n-{i}") for i in range(40)}
    cluster.api.nodes["n-2"]["status"]["conditions"].append(xid_condition(48, 1e9))
    path = tmp_path / config.FILE
    path.write_text(config.dumps(config.Config(cluster="meridian-us-central1", dry_run=False, act_on="all")))
    kubeconfig = write_kubeconfig(tmp_path, cluster.url)
    assert main(["serve", "--config", str(path), "--kubeconfig", str(kubeconfig), "--once"]) == 0
    assert record_of(cluster, "n-2").phase == "quarantined"  # Xid 48: needs analysis
    assert all(r.auth == TOKEN for r in cluster.api.requests)
    assert cluster.api.leases["warden"]["spec"]["holderIdentity"]  # it led before it acted


GOOD = json.loads(config.dumps(config.Config(cluster="c")))


def _with(**fields: Any) -> str:
    return json.dumps(GOOD | fields)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read the config: No such file or directory; mount the warden-policy ConfigMap"),
        ("a: [", "not JSON"),
        ("[]", "expected a JSON object"),
        (_with(schema="meridian.warden/v0"), "schema 'meridian.warden/v0', this tool reads 'meridian.warden/v1'"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "schema"}), "schema None"),
        (_with(surprise=1), "surprise: unknown field"),
        (_with(dry_run="no"), "dry_run: 'no' is not true or false"),
        (_with(max_per_pool=2.5), "max_per_pool: 2.5 is not an integer"),
        (_with(unhealthy_share_limit="lots"), "unhealthy_share_limit: 'lots' is not a number"),
        (_with(unhealthy_share_limit=0.9), "unhealthy_share_limit: 0.9 is not in (0, 0.5]"),
        (_with(window_s=-1), "window_s: -1.0 is not a positive number of seconds"),
        (_with(sweep_every_s=60), "sweep_every_s: 60.0 is not within [3600, 3.1536e+07] seconds"),
        (_with(sweep_max_per_pool=-1), "sweep_max_per_pool: -1 is below 0"),
        (_with(burn_in_max_per_pool=0), "burn_in_max_per_pool: 0 is below 1"),
        (_with(burn_in="yes"), "burn_in: 'yes' is not true or false"),
        (_with(xid_actions={"79": "explode"}), "xid_actions.79: 'explode' is not one of 'none'"),
        (_with(xid_actions={"0x4f": "reboot"}), "key '0x4f' is not an integer"),
        (_with(signal_actions={"gremlins": "reboot"}), "key 'gremlins' is not one of 'sxid'"),
        (_with(pools={"a": {"gpus": 8}}), "pools.a.min_tflops: missing"),
        (
            json.dumps(GOOD).replace('"drain_grace_s": 600.0', '"drain_grace_s": NaN'),
            "drain_grace_s: nan is not a finite",
        ),
        ('{"a": ' * 100_000 + "1" + "}" * 100_000, "not JSON"),
        (" " * (1024 * 1024) + "{}", "larger than 1 MiB"),
        (b"\xff\xfe{}", "not UTF-8"),
    ],
)
def test_a_bad_config_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | bytes | None, message: str
) -> None:
    path = tmp_path / "config.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--config", str(path), "--kubeconfig", "/nonexistent"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err.startswith(f"warden: {path}: ")
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_client_reads_a_kubeconfig(tmp_path: Path, cluster: Cluster) -> None:
    api = client(str(write_kubeconfig(tmp_path, cluster.url)))
    assert api.configuration.host == cluster.url
