"""`gkr health` against a local API server that checks the exact requests (pages, selectors), and its pure parts."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import pytest
from click.testing import Result

from contract import health as deep
from contract import names
from contract import warden as policy
from gkr import health, health_read
from tests.gkr.conftest import use_contexts
from tests.gkr.jsonhandler import JsonHandler
from tests.gkr.test_kube import EAST4

CENTRAL1 = "gke_meridian-train-prod_us-central1_meridian-us-central1"
DAY = 86400.0
NOW = time.time()


def stamp(t: float) -> str:
    return health.iso(t)


def check(age_days: float, verdict: str = "pass", failures: tuple[deep.Failure, ...] = ()) -> str:
    return deep.dumps(deep.DeepCheck(time=NOW - age_days * DAY, kind="sweep", verdict=verdict, failures=failures))  # type: ignore[arg-type]


def node(name: str, pool: str, phase: str | None, annotation: str | None = None, **extra: Any) -> dict[str, Any]:
    labels = {names.NODE_POOL_LABEL: pool, **({names.WARDEN_PHASE_LABEL: phase} if phase else {})}
    annotations = {names.DEEP_CHECK_ANNOTATION: annotation} if annotation is not None else {}
    conditions = [{"type": "Ready", "status": "False" if extra.get("not_ready") else "True"}]
    conditions += extra.get("conditions", [])
    return {
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"unschedulable": True} if extra.get("cordoned") else {},
        "status": {"conditions": conditions},
    }


def event(
    node_name: str,
    reason: str,
    told: deep.NodeEvent | str,
    age_days: float,
    component: str = names.WARDEN_COMPONENT,
) -> dict[str, Any]:
    """One of Warden's Events, its record made by the contract's encoder (a str: a forged record as is)."""
    record = told if isinstance(told, str) else deep.dump_event(told)
    return {
        "metadata": {
            "name": f"{node_name}.warden-x",
            "namespace": "default",
            "annotations": {names.NODE_EVENT_ANNOTATION: record},
        },
        "involvedObject": {"kind": "Node", "name": node_name},
        "reason": reason,
        "message": "what people read: never counted",
        "lastTimestamp": stamp(NOW - age_days * DAY),
        "reportingComponent": component,
    }


def left(before: str, after: str, *faults: deep.Fault) -> deep.NodeEvent:
    return deep.NodeEvent(change="left_healthy", before=before, after=after, faults=faults)


XID79, NCCL = deep.Fault(kind="xid", code=79), deep.Fault(kind="nccl_errors")


NODES = [
    node("a-1", "h200-a", "healthy", check(1)),
    node("a-2", "h200-a", "healthy", check(9)),  # older than the cadence: due
    node("a-3", "h200-a", "quarantined", check(0.5), cordoned=True),
    node("a-4", "h200-a", "held", '{"schema": "meridian.deepcheck/v1", "time": "yesterday"}', cordoned=True),
    node("a-5", "h200-a", None),  # unmanaged, never checked
    node(
        "f-1",
        "h200-flex",
        "probation",
        check(2, "fail", (deep.Failure(check="dcgm-diag", gpu=3, evidence="memory test failed"),)),
        not_ready=True,
        conditions=[
            {"type": names.XID_CONDITION, "status": "True", "message": f"79@{int(NOW - DAY)} 13@{int(NOW - 30 * DAY)}"}
        ],
    ),
    node("f-2", "h200-flex", "healthy", "x" * (deep.MAX_BYTES + 1)),
]
EVENTS = [
    event("a-3", "WardenQuarantined", left("healthy", "quarantined", XID79, NCCL), 2),
    event("a-3", "WardenAction", deep.NodeEvent(change="other", faults=(XID79, NCCL)), 2),  # not again
    event("a-4", "WardenSuspect", left("healthy", "suspect", deep.Fault(kind="sxid", code=12)), 10),  # too old
    event("a-1", "WardenAction", deep.NodeEvent(change="restart_pods", faults=(deep.Fault(kind="xid", code=13),)), 1),
    event(
        "a-1", "WardenProbation", deep.NodeEvent(change="other", before="healthy", after="probation"), 1
    ),  # a burn-in
    event("a-2", "WardenQuarantined", left("healthy", "quarantined", deep.Fault(kind="xid", code=48)), 1, "someone"),
    event(
        "f-1",
        "WardenAction",
        deep.NodeEvent(change="probation_failed", faults=(deep.Fault(kind="probation failed"),)),
        3,
    ),
    event("a-5", "WardenSuspect", left("healthy", "suspect", deep.Fault(kind="thermal")), 1),  # unknown kind
    event("a-5", "WardenSuspect", '{"schema": "meridian.node-event/v1", "change": "<script>; rm -rf"}', 1),
]
CONFIG = policy.dumps(policy.DEFAULTS)


class FakeApiServer(JsonHandler):
    requests: ClassVar[list[dict[str, Any]]] = []
    config: ClassVar[int | str] = CONFIG  # an int: that status instead

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        FakeApiServer.requests.append({"path": url.path, "query": query})
        if url.path == health_read.NODES_PATH:
            self._page(NODES, query)
        elif url.path == health_read.EVENTS_PATH:
            self._page(EVENTS, query)
        elif url.path == health_read.CONFIG_PATH and isinstance(FakeApiServer.config, str):
            self._reply({"kind": "ConfigMap", "data": {policy.FILE: FakeApiServer.config}})
        else:
            self._reply({"kind": "Status", "code": 403}, 403 if FakeApiServer.config == 403 else 404)

    def _page(self, items: list[dict[str, Any]], query: dict[str, str]) -> None:
        """Pages of `limit` objects, the continue token being the next index (as opaque to the client)."""
        start, size = int(query.get("continue", "0")), int(query["limit"])
        token = str(start + size) if start + size < len(items) else ""
        self._reply({"items": items[start : start + size], "metadata": {"continue": token} if token else {}})


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    """The fake behind us-east4's context; us-central1's refuses connections; europe-west1 has no context."""
    FakeApiServer.requests, FakeApiServer.config = [], CONFIG
    monkeypatch.setattr("gkr.kube.PAGE_SIZE", 3)  # seven nodes: three pages
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeApiServer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_port}"
    contexts = {EAST4: url, CENTRAL1: "http://127.0.0.1:9"}
    use_contexts(tmp_path, monkeypatch, contexts)
    yield url
    httpd.shutdown()


def report_of(result: Result) -> dict[str, Any]:
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def east4(whole: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in whole["clusters"] if c["region"] == "us-east4")


def test_reads_are_paged_and_selected_exactly(gkr: Callable[..., Result], server: str) -> None:
    result = gkr("health", "--region", "us-east4", "--json")
    assert result.exit_code == 0, result.stderr
    seen = [(r["path"], r["query"]) for r in FakeApiServer.requests]
    selector = {"fieldSelector": "involvedObject.kind=Node,source=warden"}
    assert seen == [
        ("/api/v1/nodes", {"limit": "3"}),
        ("/api/v1/nodes", {"limit": "3", "continue": "3"}),
        ("/api/v1/nodes", {"limit": "3", "continue": "6"}),
        ("/api/v1/namespaces/default/events", {**selector, "limit": "3"}),
        ("/api/v1/namespaces/default/events", {**selector, "limit": "3", "continue": "3"}),
        ("/api/v1/namespaces/default/events", {**selector, "limit": "3", "continue": "6"}),
        ("/api/v1/namespaces/warden/configmaps/warden-policy", {}),
    ]


def test_json_report_per_pool_and_node(gkr: Callable[..., Result], server: str) -> None:
    result = gkr("health", "--json")
    assert result.exit_code == 1  # us-central1 refuses, europe-west1 has no context: still reported
    whole = report_of(result)
    assert whole["schema"] == "meridian.health/v1"
    assert whole["window_days"] == 7
    cluster = east4(whole)
    assert cluster["reachable"]
    assert cluster["cluster"] == "meridian-us-east4"
    assert cluster["context"] == EAST4
    pools = {p["pool"]: p for p in cluster["pools"]}
    assert pools["h200-a"] == {
        "pool": "h200-a",
        "nodes": 5,
        "states": {"healthy": 2, "quarantined": 1, "held": 1, "unmanaged": 1},
        "cordoned": 2,
        "not_ready": 0,
        "due": 3,  # a-2 (9 days old), a-4 (unreadable), a-5 (never)
        "never_checked": 2,
        "failures": {"nccl": 1, "other": 1, "xid:13": 1, "xid:79": 1},
    }
    assert pools["h200-flex"]["states"] == {"healthy": 1, "probation": 1}
    assert pools["h200-flex"]["failures"] == {"deep-check:dcgm-diag": 1, "probation": 1, "xid:79": 1}
    by_name = {n["name"]: n for n in cluster["nodes"]}
    assert by_name["a-1"]["last_deep_check"]["verdict"] == "pass"
    assert not by_name["a-1"]["due"]
    assert list(by_name["a-1"]["failures"]) == ["xid:13"]
    assert by_name["a-2"]["due"]
    assert by_name["a-2"]["failures"] == {}
    assert by_name["a-4"]["last_deep_check"]["never"]
    assert "a-4: meridian.dev/deep-check" in (by_name["a-4"]["last_deep_check"]["why"])
    assert by_name["a-4"]["failures"] == {}  # its SXid is ten days old
    assert by_name["a-5"]["last_deep_check"] == {"never": True, "why": "no annotation"}
    assert by_name["f-2"]["last_deep_check"]["never"]
    assert "longer than" in by_name["f-2"]["last_deep_check"]["why"]
    assert by_name["f-1"]["last_deep_check"]["failures"] == [
        {"check": "dcgm-diag", "gpu": 3, "evidence": "memory test failed"}
    ]
    assert set(by_name["f-1"]["failures"]) == {"deep-check:dcgm-diag", "probation", "xid:79"}  # not the 30-day Xid 13
    assert not by_name["f-1"]["ready"]
    assert by_name["a-3"]["cordoned"]
    if health_read.sweep_every(policy.DEFAULTS) is None:  # this contract's Warden config has no sweep cadence yet
        assert cluster["cadence"] == {"seconds": 7 * DAY, "source": "default"}
        assert cluster["notes"] == [
            "ConfigMap warden/warden-policy sets no sweep cadence; due after the default 7 days"
        ]
    else:
        assert cluster["cadence"] == {"seconds": 7 * DAY, "source": "ConfigMap warden/warden-policy"}
    others = {c["region"]: c for c in whole["clusters"] if c["region"] != "us-east4"}
    assert others["us-central1"] == {
        "region": "us-central1",
        "cluster": "meridian-us-central1",
        "context": CENTRAL1,
        "reachable": False,
        "error": "connection refused",
    }
    assert others["europe-west1"]["error"].startswith("no context; run: gcloud container clusters get-credentials")


def test_table_and_node_lines(gkr: Callable[..., Result], server: str) -> None:
    result = gkr("health", "--nodes", "--due-after", "0.25")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert any("h200-a" in line and "healthy 2, quarantined 1, held 1, unmanaged 1" in line for line in lines)
    assert "us-east4: due after 0.25 days (--due-after)" in lines
    assert "us-central1: unreachable (connection refused)" in lines
    assert any(
        line.startswith("  h200-a/a-3: quarantined cordoned; deep check: pass sweep level 2 at ") for line in lines
    )
    assert any(line.startswith("  h200-a/a-5: unmanaged; deep check: never (no annotation); due") for line in lines)
    assert not any(r["path"] == health_read.CONFIG_PATH for r in FakeApiServer.requests)  # the flag decides


def test_unreadable_config_falls_back_with_a_note(gkr: Callable[..., Result], server: str) -> None:
    FakeApiServer.config = 403
    result = gkr("health", "--region", "us-east4", "--json")
    cluster = east4(report_of(result))
    assert result.exit_code == 0
    assert cluster["cadence"]["source"] == "default"
    assert cluster["notes"] == ["reading ConfigMap warden/warden-policy: forbidden; due after the default 7 days"]
    FakeApiServer.config = '{"schema": "meridian.warden/v1", "sweep_every_s": "soon"}'
    cluster = east4(report_of(gkr("health", "--region", "us-east4", "--json")))
    assert cluster["cadence"]["source"] == "default"
    assert "ConfigMap warden/warden-policy" in cluster["notes"][0]


def test_a_list_stops_at_its_bound(gkr: Callable[..., Result], server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gkr.kube.MAX_ITEMS", 4)
    cluster = east4(report_of(gkr("health", "--region", "us-east4", "--json", "--due-after", "7")))
    assert len(cluster["nodes"]) == 6  # two pages of three, then no more requests
    assert cluster["notes"] == ["only the first 6 nodes were read", "only the first 6 of Warden's Events were read"]
    assert [r["path"] for r in FakeApiServer.requests].count(health_read.NODES_PATH) == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--region", "mars-1"), "error: --region mars-1: use one of europe-west1, us-central1, us-east4"),
        (("--context", "c"), "error: --context names one cluster's context: give one --region with it"),
        (("--due-after", "0"), "error: --due-after 0.0: a number of days in (0, 3650]"),
        (("--due-after", "nan"), "error: --due-after nan: a number of days in (0, 3650]"),
    ],
)
def test_bad_input_is_one_line(gkr: Callable[..., Result], args: tuple[str, ...], message: str) -> None:
    result = gkr("health", *args)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [message]


HOSTILE: list[Any] = [
    None,
    "",
    "{",
    "[]",
    '{"schema": "meridian.deepcheck/v1"}',
    '{"schema": "meridian.deepcheck/v1", "time": 1e400, "kind": "sweep", "verdict": "pass"}',
    '{"schema": "meridian.deepcheck/v1", "time": 9e12, "kind": "sweep", "verdict": "pass"}',
    '{"schema": "meridian.deepcheck/v1", "time": 1, "kind": "sweep", "verdict": "pass", "extra": 1}',
    '{"schema": "meridian.deepcheck/v2", "time": 1, "kind": "sweep", "verdict": "pass"}',
    "[" * 100_000,
    17,
]


@pytest.mark.parametrize("annotation", HOSTILE)
def test_hostile_annotations_are_never_a_pass(annotation: Any) -> None:
    obj = {"metadata": {"name": "n", "annotations": {names.DEEP_CHECK_ANNOTATION: annotation}}}
    found = health.node_of(obj, [], NOW, 7 * DAY)
    assert found is not None
    assert found.check is None
    assert found.due
    assert found.never_why


@pytest.mark.parametrize(
    "obj",
    [
        {},
        {"metadata": []},
        {"metadata": {"name": 3}},
        {"metadata": {"name": "n", "labels": "x", "annotations": []}, "status": {"conditions": "x"}},
        {"metadata": {"name": "n"}, "status": {"conditions": [1, {"type": names.XID_CONDITION, "status": "True"}]}},
        {"metadata": {"name": "n"}, "status": {"conditions": [{"type": names.XID_CONDITION, "status": "True",
                                                               "message": "79@x @ 9999999@1 79@" + "9" * 20}]}},
    ],
)  # fmt: skip
def test_hostile_nodes_never_crash(obj: dict[str, Any]) -> None:
    found = health.nodes_of([obj], [{"involvedObject": "x"}, {"reportingComponent": names.WARDEN_COMPONENT}], NOW, DAY)
    assert all(n.failures == {} for n in found)


def test_event_records_decode_strictly() -> None:
    told = deep.NodeEvent(
        change="left_healthy", before="healthy", after="suspect", faults=(XID79, deep.Fault(kind="sxid", code=12))
    )
    assert health.event_kinds(event("n", "WardenSuspect", told, 0)) == ["xid:79", "sxid:12"]
    faults = (deep.Fault(kind="preflight"), deep.Fault(kind="gpu_missing"), deep.Fault(kind="x"))
    assert health.fault_kinds(faults) == ["preflight", "gpu-missing", "other"]
    for forged in (
        '{"schema": "meridian.node-event/v1", "change": "left_healthy", "faults": [{"kind": "<b>"}]}',
        "{",
        "x" * 5000,
    ):
        assert health.event_kinds(event("n", "WardenSuspect", forged, 0)) == []
    # The reason text Warden writes and the faults in it: one encoder, one decoder.
    assert deep.parse_faults(deep.faults_text((XID79, NCCL))) == (XID79, NCCL)


def test_no_cluster_read_is_one_line_that_says_how_to_fix_it(
    gkr: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    result = gkr("health")
    assert result.exit_code == 1
    assert result.stdout == ""  # no empty table
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: could read no cluster (no kubeconfig): ")
    assert "gcloud container clusters get-credentials meridian-us-east4" in line
