"""The Warden service: one round every `round_s` while this replica leads.

A round reads every GPU Node from the watch cache, adds what only the API
can tell (pods left on draining nodes, probation results, NCCL failure
Events), lets `controller.run_round` decide within the safety limits, and
hands the decisions to the Actuator.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from warden.actions import Actuator
from warden.controller import OUT_OF_SERVICE, Round, run_round
from warden.kube import ApiError, Kube
from warden.leader import Elector
from warden.metrics import WardenMetrics
from warden.nodecache import NodeCache
from warden.observe import is_gpu_node, record_of, view
from warden.policy import Policy
from warden.state import PHASES
from warden.trust import NCCL_REASON, TEAM_LABEL, Verdicts, nccl_failures, preflight_failures

log = logging.getLogger("warden")


class Warden:
    def __init__(
        self,
        kube: Kube,
        policy: Policy,
        cache: NodeCache,
        actuator: Actuator,
        metrics: WardenMetrics,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube, self.policy, self.cache, self.actuator, self.metrics = kube, policy, cache, actuator, metrics
        self.clock = clock

    def round(self) -> Round:
        started = self.clock()
        nodes = {n["metadata"]["name"]: n for n in self.cache.snapshot() if is_gpu_node(n)}
        # Tenants' reports, each checked against the pod the cluster placed (warden.trust).
        verdicts = Verdicts()
        events = self.kube.events(f"reason={NCCL_REASON}")
        nccl_failures(events, self.kube.pod, started, self.policy.window_s, verdicts)
        preflight_failures(self.kube.pods_labelled(TEAM_LABEL), started, self.policy.window_s, verdicts)
        for reason, count in verdicts.ignored.items():
            self.metrics.ignored.inc(count, reason=reason)
        views, seen = [], {}
        for name, node in nodes.items():
            record = record_of(node)
            # Asked once per round, used by the decision and by ensure() alike.
            pods = self.actuator.pods(name) if record.phase == "draining" else []
            probation = self.actuator.probation_result(name, record) if record.phase == "probation" else None
            seen[name] = (pods, probation)
            finished = probation if probation in ("pass", "fail") else None
            views.append(
                view(
                    node,
                    record,
                    started,
                    self.policy,
                    len(pods),
                    finished,
                    verdicts.nccl[name],
                    verdicts.preflight.get(name),
                )
            )
        decided = run_round(views, self.policy, started)
        phases: Counter[str] = Counter()
        for v in views:
            decision = decided.decisions.get(v.name)
            if decision is not None:
                self.actuator.apply(nodes[v.name], v.record, decision)
            else:
                self.actuator.ensure(self.cache.get(v.name) or nodes[v.name], v.record, *seen[v.name])
            phases[(decision.record if decision else v.record).phase] += 1
        for phase in PHASES:
            self.metrics.nodes.set(phases[phase], phase=phase)
        self.metrics.blocked.set(decided.blocked)
        self.metrics.rounds.inc()
        self.metrics.round_seconds.set(self.clock() - started)
        out = sum(phases[p] for p in OUT_OF_SERVICE)
        log.info("round: %d GPU nodes, %d out of service, %d decisions", len(views), out, len(decided.decisions))
        return decided


def serve_http(port: int, routes: dict[str, Callable[[], tuple[int, str]]]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            code, text = routes.get(self.path, lambda: (404, "not found\n"))()
            body = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)  # probes and Prometheus reach the pod IP
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def serve(
    warden: Warden,
    elector: Elector,
    stop: threading.Event,
    round_s: float = 30,
    renew_s: float = 5,
    once: bool = False,
) -> None:
    """Lead, then run rounds; renew the Lease between them and stop acting the moment it is lost."""
    watcher: threading.Thread | None = None
    next_round = 0.0
    while not stop.is_set():
        leading = elector.step()
        warden.metrics.leader.set(1 if leading else 0)
        if leading:
            if watcher is None:
                warden.cache.relist()
                watcher = threading.Thread(target=warden.cache.run, args=(stop,), daemon=True)
                watcher.start()
            if warden.clock() >= next_round:
                try:
                    warden.round()
                except (ApiError, OSError) as error:
                    warden.metrics.api_errors.inc()
                    log.warning("round failed: %s", error)
                next_round = warden.clock() + round_s
                if once:
                    return
        stop.wait(renew_s)
