"""The Warden service: one round every `round_s` while this replica leads, and sooner for new signals.

A round reads every GPU Node from the watch cache, adds what only the API
can tell (pods left on draining nodes, probation results, the host report
operation a replacement waits for, NCCL failure Events), lets
`controller.run_round` decide within the safety limits, and hands the
decisions to the Actuator. Nothing about one node (an unreadable
record, a Node not shaped like one, a failed or timed-out read) ends a
round: that node is held for a person or read again next round, and the
rest go on. A watch event with a new signal starts a round for that node
after a short debounce; the safety budget still counts the whole pool.

With a Sweeper (issue 21), a full round also reads which nodes jobs use and
the idle sweeps' Jobs: running sweeps count against the pool's budget, a
joining idle node starts its burn-in, a finished burn-in is recorded on the
Node with the record, and after the decisions warden.sweep's plan is carried
out within what the round left of the budget.

Tenants' reports (issue 27) are never signals to the policy: warden.trust
turns them into requests, and the Sweeper answers them with Warden's own
verification checks (warden.verify), whose failures are.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection
from typing import Any

from contract import names
from warden import deepcheck
from warden.actions import Actuator, probation_job_name
from warden.controller import OUT_OF_SERVICE, NodeView, Round, counts_out, run_round
from warden.kube import ApiError, Kube, LeaseLost
from warden.leader import Elector
from warden.metrics import WardenMetrics, track_leadership
from warden.nodecache import EventWatch, NodeCache
from warden.observe import is_gpu_node, queued, read_node_record, view
from warden.policy import Policy
from warden.reports import TenantReports, counted, read_reports
from warden.state import PHASES, Decision, Facts, HostReport, Record, is_operation
from warden.sweeper import Sweeper
from warden.trust import Verdicts
from warden.verify import Request

log = logging.getLogger(__package__)


NodeReads = tuple[list[dict[str, Any]], str | None]  # pods left on a draining node, probation result

MAX_PENDING = 10_000  # nodes waiting for an early round; a flood of forged Events cannot grow it further


class Trigger:
    """Nodes a watch event showed a new signal on, released together debounce_s after the first of them.

    A burst of events (an agent patching several conditions, a rack failing) becomes one round
    instead of many, and a lone signal waits debounce_s, not a whole round interval.
    """

    def __init__(self, debounce_s: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.debounce_s, self.clock = debounce_s, clock
        self.wake = threading.Event()
        self._pending: dict[str, float] = {}
        self._lock = threading.Lock()

    def poke(self, name: str) -> None:
        with self._lock:
            if len(self._pending) < MAX_PENDING:  # beyond, the next full round covers them
                self._pending.setdefault(name, self.clock())
        self.wake.set()

    def due_in(self) -> float | None:
        """Seconds until the pending nodes are due (0: now), None when nothing is pending."""
        with self._lock:
            if not self._pending:
                return None
            return max(0.0, min(self._pending.values()) + self.debounce_s - self.clock())

    def take(self) -> set[str]:
        """The nodes due now (all pending, once the oldest waited debounce_s), or none."""
        with self._lock:
            if not self._pending or self.clock() < min(self._pending.values()) + self.debounce_s:
                return set()
            due, self._pending = set(self._pending), {}
            return due


class Warden:
    def __init__(
        self,
        kube: Kube,
        policy: Policy,
        cache: NodeCache,
        actuator: Actuator,
        metrics: WardenMetrics,
        clock: Callable[[], float] = time.time,
        sweeper: Sweeper | None = None,
        reports: TenantReports | None = None,
    ) -> None:
        self.kube, self.policy, self.cache, self.actuator, self.metrics = kube, policy, cache, actuator, metrics
        self.clock, self.sweeper, self.reports = clock, sweeper, reports
        self.pools: set[str] = set()  # every pool a round has seen, for warden_nodes
        self.xids_counted: dict[str, float] = {}  # node -> time of the newest Xid counted in warden_xids_total

    def _tenant_reports(self, now: float) -> Verdicts:
        """Tenants' reports as requests only (warden.trust): the reader's latest (warden.reports), or read now.

        If they cannot be read this round, the round goes on without them: they are read again next round.
        """
        if self.reports is not None:
            return self.reports.latest()
        try:
            return counted(read_reports(self.kube, self.policy, now), self.metrics)
        except ApiError as error:
            self.metrics.api_errors.inc()
            log.warning("tenant reports not read this round: %s", error)
            return Verdicts()

    def _node_reads(self, name: str, record: Record) -> NodeReads:
        """Pods left on a draining node and its probation result; on an API error, what changes nothing."""
        pods: list[dict[str, Any]] = []
        probation: str | None = None
        try:
            # Asked once per round, used by the decision and by ensure() alike.
            if record.phase == "draining":
                pods = self.actuator.pods(name)
            if record.phase == "probation":
                probation = self.actuator.probation_result(name, record)
        except ApiError as error:
            # Unknown pods count as "still there" (the grace period still ends the drain); an unknown
            # probation result as "still running". Read again next round.
            self.metrics.api_errors.inc()
            log.warning("%s: %s", name, error)
            return ([{}] if record.phase == "draining" else []), None
        return pods, probation

    def _view(
        self, name: str, node: dict[str, Any], now: float, decide: bool
    ) -> tuple[NodeView, list[dict[str, Any]], str | None]:
        record, unreadable = read_node_record(node)
        if unreadable:
            self.metrics.node_errors.inc(stage="record")
            log.warning("%s: held for a person: %s", name, unreadable)
        pods, probation = self._node_reads(name, record) if decide else ([], None)
        finished = probation if probation in ("pass", "fail") else None
        idle = self.sweeper is not None and self.sweeper.idle(name)
        report = self._host_report(name, node, record) if decide else None
        found = view(node, record, now, self.policy, len(pods), finished, idle, probation == "missing", report)
        return found, [p for p in pods if p], probation

    def _host_report(self, name: str, node: dict[str, Any], record: Record) -> HostReport | None:
        """The operation of the host report a replacement waits for; None when there is none or it cannot be
        read this round (an API error: read again next round; HOST_REPORT_WAIT_S bounds the wait)."""
        if record.phase != "remediating" or not is_operation(record.report):
            return None
        try:
            return self.actuator.host_report(node, record.report)
        except ApiError as error:
            self.metrics.api_errors.inc()
            log.warning("%s: host report %s not read this round: %s", name, record.report, error)
            return None

    def round(self, only: Collection[str] | None = None) -> Round:
        """One round over every GPU node; with `only`, decide and act on those nodes alone, budget over all."""
        started = self.clock()
        nodes = self._gpu_nodes()
        if self.sweeper is not None and only is None:
            self.sweeper.observe(nodes, started)
        views, seen = self._views(nodes, started, only)
        self._count_xids(views, started)
        sweeping = self.sweeper.running() if self.sweeper is not None else None
        decided = run_round(views, self.policy, started, only, sweeping)
        phases = self._act(nodes, views, seen, decided, only, started)
        self._export_phases(views, phases, decided)
        if only is None:  # tenants' requests and the checks that answer them, with the sweeps
            requests = self._tenant_reports(started).requests(self.policy.nccl_failures)
            if self.sweeper is not None:
                self._sweeps(nodes, views, decided, started, requests)
            elif requests:
                self.metrics.ignored.inc(len(requests), reason="no_verifier")
        self.metrics.rounds.inc()
        self.metrics.round_seconds.set(self.clock() - started)
        out = sum(n for (_, phase), n in phases.items() if phase in OUT_OF_SERVICE)
        log.info(
            "round%s: %d GPU nodes, %d out of service, %d decisions",
            "" if only is None else f" for {len(only)} node(s)",
            len(views),
            out,
            len(decided.decisions),
        )
        return decided

    def _gpu_nodes(self) -> dict[str, dict[str, Any]]:
        """The GPU Nodes in the watch cache, by name; an object not shaped like a Node is counted and skipped."""
        nodes: dict[str, dict[str, Any]] = {}
        for node in self.cache.snapshot():
            try:
                if is_gpu_node(node):
                    nodes[str(node["metadata"]["name"])] = node
            except Exception as error:  # not shaped like a Node: nothing to act on, but say so
                self.metrics.node_errors.inc(stage="observe")
                log.warning("skipped a node object Warden cannot read: %s", type(error).__name__)
        return nodes

    def _views(
        self, nodes: dict[str, dict[str, Any]], now: float, only: Collection[str] | None
    ) -> tuple[list[NodeView], dict[str, NodeReads]]:
        """Every node's view, and for each the pods and probation result read for its decision."""
        views: list[NodeView] = []
        seen: dict[str, NodeReads] = {}
        for name, node in nodes.items():
            decide = only is None or name in only
            try:
                found, pods, probation = self._view(name, node, now, decide)
            except LeaseLost:
                raise
            except Exception as error:  # one node's data must never end the round: hold it for a person
                self.metrics.node_errors.inc(stage="observe")
                why = f"node unreadable: {type(error).__name__}: {str(error)[:200]}"
                log.warning("%s: held for a person: %s", name, why)
                found, pods, probation = NodeView(name, _pool(node), Record("held", reason=why), Facts(), ()), [], None
            views.append(found)
            seen[name] = (pods, probation)
        return views, seen

    def _act(
        self,
        nodes: dict[str, dict[str, Any]],
        views: list[NodeView],
        seen: dict[str, NodeReads],
        decided: Round,
        only: Collection[str] | None,
        now: float,
    ) -> Counter[tuple[str, str]]:
        """Apply each decision (or keep an undecided node's phase in force); the nodes per (pool, phase) after."""
        phases: Counter[tuple[str, str]] = Counter()
        for v in views:
            decision = decided.decisions.get(v.name)
            phases[v.pool, (decision.record if decision else v.record).phase] += 1
            if only is not None and v.name not in only:
                continue
            if decision is not None:
                burn_in = self._burn_in_result(v, decision, seen[v.name][1], now)
                self.actuator.apply(nodes[v.name], v.record, decision, burn_in)
            else:
                self.actuator.ensure(self.cache.get(v.name) or nodes[v.name], v.record, *seen[v.name])
        return phases

    def _export_phases(self, views: list[NodeView], phases: Counter[tuple[str, str]], decided: Round) -> None:
        self.pools |= {v.pool for v in views}  # a pool that empties reads 0, not its last count
        for pool in sorted(self.pools):
            for phase in PHASES:
                self.metrics.nodes.set(phases[pool, phase], pool=pool, phase=phase)
        self.metrics.blocked.set(decided.blocked)

    def _count_xids(self, views: list[NodeView], now: float) -> None:
        """warden_xids_total: each Xid an agent condition lists, once (by its time), within the policy's window.

        DCGM on GKE exports no Xid series with the node pool, so the per-pool Xid rate alert reads this.
        """
        for v in views:
            since = newest = self.xids_counted.get(v.name, now - self.policy.window_s)
            for signal in v.signals:
                if signal.kind == "xid" and signal.code is not None and signal.at > since:
                    self.metrics.xids.inc(pool=v.pool, xid=str(signal.code))
                    newest = max(newest, signal.at)
            self.xids_counted[v.name] = newest

    def _burn_in_result(self, v: NodeView, decision: Decision, probation: str | None, now: float) -> str | None:
        """The deep check annotation of a burn-in (probation) that just finished; counted once, as it is recorded."""
        if not self.policy.burn_in or v.record.phase != "probation" or decision.record.phase == "probation":
            return None
        if probation not in ("pass", "fail"):
            return None
        pods: list[dict[str, Any]] = []
        if probation == "fail":
            try:
                pods = self.actuator.job_pods(probation_job_name(v.name, v.record.since))
            except ApiError as error:  # the verdict stands; only the detail is missing
                self.metrics.api_errors.inc()
                log.warning("%s: burn-in pods not read: %s", v.name, error)
        if not self.policy.dry_run:
            self.metrics.deep_checks.inc(pool=v.pool, kind="burn_in", verdict=probation)
        return deepcheck.record("burn_in", "pass" if probation == "pass" else "fail", now, pods)

    def _sweeps(
        self,
        nodes: dict[str, dict[str, Any]],
        views: list[NodeView],
        decided: Round,
        now: float,
        requests: list[Request],
    ) -> None:
        assert self.sweeper is not None
        records = {
            v.name: (decided.decisions[v.name].record if v.name in decided.decisions else v.record) for v in views
        }
        out = Counter(v.pool for v in views if counts_out(records[v.name]))
        facts = {v.name: v.facts for v in views}

        def in_service(name: str) -> bool:
            f = facts[name]
            return (
                records[name].phase == "healthy"
                and not f.opted_out
                and not f.cordoned_by_other
                and not _flex(nodes[name])
            )

        try:
            self.sweeper.round(nodes, in_service, out, decided.blocked_pools, now, requests)
        except LeaseLost:
            raise
        except ApiError as error:
            self.metrics.api_errors.inc()
            log.warning("sweeps not carried out this round: %s", error)
        except Exception as error:  # the round's decisions stand; sweeps are tried again next round
            self.metrics.node_errors.inc(stage="sweep")
            log.warning("sweeps not carried out this round: %s: %s", type(error).__name__, str(error)[:200])


def _flex(node: dict[str, Any]) -> bool:
    """A flex-start node: made for one workload and gone with it, burned in when it joins, never swept."""
    return queued(node)


def _pool(node: Any) -> str:
    try:
        return str(node["metadata"]["labels"][names.NODE_POOL_LABEL])
    except (KeyError, TypeError):
        return ""


def serve(
    warden: Warden,
    elector: Elector,
    stop: threading.Event,
    round_s: float = 30,
    once: bool = False,
    trigger: Trigger | None = None,
) -> None:
    """Lead, then run a round every round_s, and one for the nodes a watch event touched debounce_s after it.

    The Lease is renewed by its own thread (Elector.keep) however long a round takes, and every
    mutating request checks that this replica still holds it (the clients' guard): losing it
    stops the round at the next write (LeaseLost) and this replica waits as a standby.
    """
    track_leadership(warden.metrics, elector)
    elector.step()  # the first try at once, then the renewal thread
    if once:
        if elector.holds():
            warden.cache.relist()
            _safe_round(warden, None)
        return
    threading.Thread(target=elector.keep, args=(stop,), name="warden-lease", daemon=True).start()
    trigger = trigger or Trigger()
    watcher: threading.Thread | None = None
    next_round = 0.0
    while not stop.is_set():
        if elector.holds():
            if watcher is None:
                try:
                    warden.cache.relist()
                except ApiError as error:
                    warden.metrics.api_errors.inc()
                    log.warning("node list failed: %s", error)
                    stop.wait(min(round_s, 5))
                    continue
                warden.cache.on_signal = trigger.poke
                watcher = threading.Thread(target=warden.cache.run, args=(stop,), name="warden-watch", daemon=True)
                watcher.start()
                events = EventWatch(warden.kube, names.NCCL_FAILURE_REASON, warden.cache.has, trigger.poke)
                threading.Thread(target=events.run, args=(stop,), name="warden-events", daemon=True).start()
                if warden.reports is not None:  # tenants' reports apart from the rounds (warden.reports)
                    reader = warden.reports.run
                    threading.Thread(
                        target=reader, args=(stop, elector.holds), name="warden-reports", daemon=True
                    ).start()
            if warden.clock() >= next_round:
                trigger.take()  # a full round covers whatever was pending
                _safe_round(warden, None)
                next_round = warden.clock() + round_s
            elif touched := trigger.take():
                warden.metrics.triggered.inc()
                _safe_round(warden, touched)
        trigger.wake.clear()  # before due_in(): a poke from now on wakes the wait below
        due = trigger.due_in()
        wait = max(0.05, min(next_round - warden.clock(), 1.0 if due is None else due, 1.0))
        trigger.wake.wait(wait)  # a watch event wakes the loop at once; it then waits out the debounce


def _safe_round(warden: Warden, only: Collection[str] | None) -> None:
    try:
        warden.round(only)
    except LeaseLost as error:
        warden.metrics.lease_lost.inc()
        log.warning("round stopped: %s", error)
    except ApiError as error:
        warden.metrics.api_errors.inc()
        log.warning("round failed: %s", error)
    except Exception as error:  # the service outlives any one round
        warden.metrics.node_errors.inc(stage="round")
        log.exception("round failed: %s", error)
