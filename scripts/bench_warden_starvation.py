"""Benchmark: Warden under a tenant's starvation attack (issue 39) — its memory and its health port.

Warden's real code (node cache, round, tenant reports, sweeper; dry run) against the loopback fake API
server of tests/warden, run in a process of its own so that only Warden's memory is measured here. The
fake holds 1,280 GPU Nodes, a team's pods and 200,000 Events, most of them reason NCCLFailure from one
team's namespace (the attack: teams may create Events without a count quota), all within the policy's
window, naming a thousand of the team's pods. Meanwhile an attacker thread holds 1,000 idle connections
to Warden's health server from a team pod's address (127.0.0.2), reopening each one the server drops,
and a prober asks /healthz every 50 ms from another (127.0.0.1: the kubelet probes from the node). All
of it shares this process's GIL with the round, which a real attacker in its own pod would not.

Reported: the peak RSS of this process (what the container's memory limit counts) against half of
Warden's limit (512 MiB in kustomize/base/warden/deployment.yaml), the tracemalloc peak of one round,
the Event pages the round asked for, and /healthz's answers and latency (median, max) while the
connections were held. One run's numbers; nothing here is a test.

    .venv/bin/python scripts/bench_warden_starvation.py [--events 200000] [--idle 1000] [--qps 20]
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import selectors
import socket
import statistics
import sys
import threading
import time
import tracemalloc
import urllib.request
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.warden.fakes: the loopback API server

from contract import names
from tests.warden.fakes import ApiState, FakeApiServer, node, pod, serving
from warden.actions import Actuator
from warden.gce import Compute
from warden.httpserve import serve_http
from warden.kube import Kube
from warden.metrics import WardenMetrics
from warden.nodecache import NodeCache
from warden.policy import Policy
from warden.ratelimit import TokenBucket
from warden.service import Warden
from warden.sweeper import Sweeper

LIMIT_MIB = 512  # Warden's memory limit (kustomize/base/warden/deployment.yaml)
NOW = time.time()
TEAM_NS = "team-research"
ATTACKER = "127.0.0.2"  # a team pod's address; the probe comes from 127.0.0.1, as the kubelet from the node's
STAMP = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(NOW - 60))
MESSAGE = "NCCL WARN NET/IB : Got completion from peer with error 12, opcode 0, len 0, vendor err 129 " * 3


def _events(count: int, nodes: int) -> list[dict[str, Any]]:
    """`count` Events, 95% NCCLFailure from TEAM_NS naming 1,000 pods, the rest another reason (filtered out)."""
    shared_source = [{"component": "meridian-trainer", "host": f"n-{i:04d}"} for i in range(nodes)]
    involved = [{"apiVersion": "v1", "kind": "Pod", "name": f"w-{i}", "namespace": TEAM_NS} for i in range(1000)]
    events = []
    for i in range(count):
        reason = names.NCCL_FAILURE_REASON if i % 20 else "BackOff"
        events.append(
            {
                "metadata": {"name": f"w-{i % 1000}.{i:x}", "namespace": TEAM_NS},
                "involvedObject": involved[i % 1000],
                "reason": reason,
                "source": shared_source[i % nodes],
                "message": MESSAGE,
                "count": 1,
                "lastTimestamp": STAMP,
            }
        )
    return events


def _api_child(pipe: Connection, events: int, nodes: int) -> None:
    """The fake API server, in its own process: its URL goes up the pipe; it serves until the pipe says stop."""
    api = ApiState(watch_wait_s=30)
    api.nodes = {f"n-{i:04d}": node(f"n-{i:04d}", pool=f"h200-{'abc'[i % 3]}") for i in range(nodes)}
    team = {"labels": {names.TEAM_LABEL: "research"}}
    api.pods = [pod(f"w-{i}", f"n-{i % nodes:04d}", namespace=TEAM_NS, metadata=team) for i in range(1000)]
    api.events = _events(events, nodes)
    with serving(FakeApiServer, api) as url:
        pipe.send(url)
        pipe.recv()
        lists = [r for r in api.requests if r.path == "/api/v1/events" and r.query.get("watch") != "true"]
        pipe.send({"event_lists": len(lists), "limits": sorted({r.query.get("limit", "none") for r in lists})})


def _kube(url: str, qps: float) -> Kube:
    from kubernetes import client as k8s

    configuration = k8s.Configuration(host=url)
    configuration.api_key, configuration.api_key_prefix = {"BearerToken": "bench"}, {"BearerToken": "Bearer"}
    configuration.retries = False
    return Kube(k8s.ApiClient(configuration), TokenBucket(qps, 40))


def _warden(url: str, qps: float) -> Warden:
    kube, metrics = _kube(url, qps), WardenMetrics()
    policy = Policy(dry_run=True, act_on="all")
    cache = NodeCache(kube)
    cache.relist()
    actuator = Actuator(kube, Compute(token=lambda: "bench", base=f"{url}/compute/v1"), policy, cache, metrics)
    sweeper = Sweeper(kube, policy, metrics, cache.store)
    return Warden(kube, policy, cache, actuator, metrics, sweeper=sweeper)


def _hold(port: int, count: int, stop: threading.Event, held: list[int]) -> None:
    """Keep `count` idle connections open to the port, reopening each one the server closes."""
    selector = selectors.DefaultSelector()
    open_: set[socket.socket] = set()
    while not stop.is_set():
        while len(open_) < count and not stop.is_set():
            sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(ATTACKER, 0))
            selector.register(sock, selectors.EVENT_READ)
            open_.add(sock)
        held[0] = max(held[0], len(open_))
        for key, _ in selector.select(0.2):
            dropped = key.fileobj
            assert isinstance(dropped, socket.socket)
            selector.unregister(dropped)
            open_.discard(dropped)
            dropped.close()
            held[1] += 1  # dropped by the server, reopened
        stop.wait(0.25)  # a burst of reconnects four times a second: a flood, paced to leave the machine's cores usable
    for sock in open_:
        sock.close()


def _probe(port: int, stop: threading.Event, latencies: list[float], failures: list[str]) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as response:  # the kubelet's 1 s
                response.read()
            latencies.append(time.perf_counter() - started)
        except OSError as error:  # URLError carries the cause: a timeout, a reset
            failures.append(f"{type(error).__name__}: {getattr(error, 'reason', error)}"[:80])
        stop.wait(0.05)


def _rss_mib() -> tuple[float, float]:
    """(current, peak) resident memory of this process in MiB."""
    current = 0.0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            current = int(line.split()[1]) / 1024
    return current, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _round(warden: Warden) -> dict[str, float]:
    before, _ = _rss_mib()
    started = time.perf_counter()
    warden.round()
    seconds = time.perf_counter() - started
    _, peak = _rss_mib()
    tracemalloc.start()
    warden.round()
    traced = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return {"rss_before_mib": before, "rss_peak_mib": peak, "round_s": seconds, "tracemalloc_peak_mib": traced}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=1280)
    parser.add_argument("--qps", type=float, default=20, help="Warden's API rate limit (warden serve --qps)")
    args = parser.parse_args()
    ours, theirs = multiprocessing.get_context("fork").Pipe()
    child = multiprocessing.get_context("fork").Process(target=_api_child, args=(theirs, args.events, args.nodes))
    child.start()
    url = ours.recv()
    warden = _warden(url, args.qps)
    health = serve_http(0, {"/healthz": lambda: (200, "ok\n")})
    stop, held = threading.Event(), [0, 0]
    latencies: list[float] = []
    failures: list[str] = []
    threads = [
        threading.Thread(target=_hold, args=(health.server_port, args.idle, stop, held), daemon=True),
        threading.Thread(target=_probe, args=(health.server_port, stop, latencies, failures), daemon=True),
    ]
    for thread in threads:
        thread.start()
    time.sleep(2)  # the connections are open before the round starts
    measured = _round(warden)
    stop.set()
    for thread in threads:
        thread.join(10)
    ours.send("stop")
    served = ours.recv()
    child.join(30)
    _report(args, measured, served, held, latencies, failures, health.counts)
    return 0


def _report(
    args: Any, m: dict[str, float], served: Any, held: list[int], lat: list[float], fail: list[str], counts: Any
) -> None:
    half = LIMIT_MIB / 2
    print(f"Warden round against {args.events:,} Events ({args.nodes:,} nodes, 1,000 team pods), qps {args.qps:g}:")
    print(
        f"  peak RSS {m['rss_peak_mib']:.0f} MiB (before the rounds {m['rss_before_mib']:.0f} MiB) "
        f"vs half the limit {half:.0f} MiB: {'holds' if m['rss_peak_mib'] < half else 'OVER'}"
    )
    print(f"  tracemalloc peak of one round {m['tracemalloc_peak_mib']:.1f} MiB; first round {m['round_s']:.1f} s")
    print(f"  Event list requests {served['event_lists'] // 2} per round, limit {served['limits']}")
    median = statistics.median(lat) * 1000 if lat else float("nan")
    worst = max(lat) * 1000 if lat else float("nan")
    print(
        f"/healthz while {args.idle:,} idle connections were held (most {held[0]:,} open at once, "
        f"{held[1]:,} dropped by the server and reopened; server evicted {counts.evicted:,}):"
    )
    kinds = ", ".join(f"{kind} x{fail.count(kind)}" for kind in sorted(set(fail))) or "none"
    print(f"  {len(lat)} answered, {len(fail)} failed ({kinds}); latency median {median:.1f} ms, max {worst:.1f} ms")


if __name__ == "__main__":
    sys.exit(main())
