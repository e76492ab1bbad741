"""Idle sweeps and verifications on a real cluster: which nodes jobs use, the deep check Jobs, and
carrying out warden.sweep's and warden.verify's plans.

Idleness is read from one list of the cluster's live pods every `list_every_s`
(a job's GPU pod on a node makes it busy; DaemonSet pods and Warden's own
checks do not). It is kept in memory only: a restarted Warden waits
sweep_idle_s again before it sweeps, which delays checks and never puts one
on a busy node. A failed list or Job listing means no sweep starts this round
(the sweeps last seen still count against the budget); a pod or Job not
shaped like one is skipped and counted (`warden_node_errors_total{stage="sweep"}`).

Tenants' requests (warden.trust) are admitted here, per namespace, and
answered with verification Jobs whether or not sweeps are on.

The Jobs live in contract.names.SWEEP_NAMESPACE, not in Warden's own: Kueue
(v0.19.2) ignores a Job in a namespace its managedJobsNamespaceSelector does
not select, queue name or not, so one created suspended in `warden` would
never start (fleet.gitops.kueue).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Collection
from typing import Any

from contract import names
from contract.health import Verdict
from warden import deepcheck
from warden.actions import evictable, job_pods, uses_gpus
from warden.kube import ApiError, Kube, LeaseLost, relisting
from warden.metrics import WardenMetrics
from warden.observe import last_deep_check
from warden.policy import Policy
from warden.sweep import Candidate, SweepJob, SweepPlan, plan
from warden.verify import Request, Verifier
from warden.verify import plan as verify_plan

log = logging.getLogger(__package__)
LIVE = "status.phase!=Succeeded,status.phase!=Failed"


class Sweeper:
    def __init__(
        self,
        kube: Kube,
        policy: Policy,
        metrics: WardenMetrics,
        store: Callable[[dict[str, Any]], None] = lambda node: None,
        namespace: str = names.SWEEP_NAMESPACE,
        list_every_s: float = 300.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """`store`: where a Node Warden patched goes (the watch cache), so the next round sees the new check.
        `namespace`: where the deep check Jobs run, one Kueue manages (contract.names.SWEEP_NAMESPACE)."""
        self.kube, self.policy, self.metrics, self.namespace = kube, policy, metrics, namespace
        self.store = store
        self.list_every_s = list_every_s
        self.idle_since: dict[str, float] = {}
        self.listed_at = -math.inf
        self.jobs: list[SweepJob] = []  # the sweep Jobs as last listed
        self.jobs_read = False  # listed this round: only then do sweeps start or end
        self.now = 0.0  # the round's time: the verifier's clock unless one is given
        self.verifier = Verifier(clock or (lambda: self.now))

    def observe(self, nodes: Collection[str], now: float) -> None:
        """Refresh which nodes are idle (every list_every_s) and read the sweep Jobs (every round)."""
        if now - self.listed_at >= self.list_every_s:
            try:
                busy = relisting(self._busy_nodes)
                self.idle_since = {n: self.idle_since.get(n, now) for n in nodes if n not in busy}
                self.listed_at = now
            except ApiError as error:
                self.metrics.api_errors.inc()
                log.warning("pods not listed; no node counts as idle until they are: %s", error)
                self.idle_since, self.listed_at = {}, -math.inf
        self.jobs_read = False
        try:  # sweeps or not: verification Jobs are listed with them
            path = f"/apis/batch/v1/namespaces/{self.namespace}/jobs"
            items = self.kube.request("GET", path, [("labelSelector", f"app.kubernetes.io/name={deepcheck.SWEEP_APP}")])
            self.jobs = [j for j in (self._sweep(i) for i in items.get("items", [])) if j is not None]
            self.jobs_read = True
        except ApiError as error:
            self.metrics.api_errors.inc()
            log.warning("sweep Jobs not listed; no sweep starts this round: %s", error)

    def _busy_nodes(self) -> set[str]:
        """The nodes jobs' GPU pods hold, from every live pod read a page at a time (teams create pods)."""
        pods = self.kube.items("/api/v1/pods", [("fieldSelector", LIVE)])
        return {node for node in (self._busy(p) for p in pods) if node}

    def _busy(self, pod: Any) -> str | None:
        """The node a job's GPU pod holds; None for DaemonSet pods, Warden's own (its deep checks, its
        probation Jobs in its own namespace), and anything unreadable."""
        try:
            meta = pod.get("metadata") or {}
            ours = meta.get("namespace") in (self.namespace, names.WARDEN_NAMESPACE)
            if not ours and evictable(pod) and uses_gpus(pod):
                return str(pod["spec"]["nodeName"])
        except (AttributeError, TypeError, KeyError):
            self.metrics.node_errors.inc(stage="sweep")
        return None

    def _sweep(self, job: Any) -> SweepJob | None:
        try:
            return deepcheck.sweep_of(job)
        except (AttributeError, TypeError):
            self.metrics.node_errors.inc(stage="sweep")
            return None

    def idle(self, name: str) -> bool:
        return name in self.idle_since

    def running(self) -> Counter[str]:
        """Sweeps holding the repair budget now, by pool (as last listed, when this round's listing failed)."""
        # Verifications have their own budget (warden.verify): tenants' requests never use up the repair budget.
        return Counter(j.pool for j in self.jobs if j.kind == "sweep" and j.state in ("waiting", "running"))

    def round(
        self,
        nodes: dict[str, dict[str, Any]],
        in_service: Callable[[str], bool],
        out: Counter[str],
        blocked: Counter[str],
        now: float,
        requests: Collection[Request] = (),
    ) -> SweepPlan | None:
        """Plan and carry out this round's sweeps and verifications; None when the Jobs could not be read."""
        self.now = now
        for request, outcome in self.verifier.admit(requests, now, self.policy.window_s):
            self.metrics.verifications.inc(namespace=request.namespace, outcome=outcome)
            log.info(
                "%s asks to verify %s (%s: %s): %s",
                request.namespace,
                request.node,
                request.kind,
                request.detail,
                outcome,
            )
        if not self.jobs_read:
            return None
        candidates, checks = [], {}
        for name, node in nodes.items():
            meta = node.get("metadata") or {}
            check = last_deep_check(meta.get("annotations") or {})
            checks[name] = check.time if check else None
            pool = str((meta.get("labels") or {}).get(names.NODE_POOL_LABEL, ""))
            candidates.append(Candidate(name, pool, in_service(name), self.idle_since.get(name), checks[name]))
        decided = plan(candidates, self.jobs, out, blocked, self.policy, now)
        for job in decided.finished:
            self._finish(job, now)
        for job in decided.give_up:
            log.info(
                "%s: %s %s given up (preempted, not admitted, or budget needed): due again later",
                job.node,
                job.kind,
                job.name,
            )
            self._delete(job)
        for name in decided.start if self.policy.sweeps else ():
            self._start(nodes[name], now)
        checking = decided.verifying | {j.node for j in self.jobs if j.state in ("waiting", "running")}
        start, done = verify_plan(self.verifier.pending, in_service, checks, checking, len(decided.verifying))
        for name in done:
            self.verifier.pending.pop(name, None)
        for request in start:
            if self._start(nodes[request.node], now, request):
                self.verifier.pending.pop(request.node, None)
        for pool in {c.pool for c in candidates}:
            self.metrics.sweeps_running.set(decided.running[pool], pool=pool)
        return decided

    def _finish(self, job: SweepJob, now: float) -> None:
        verdict: Verdict = "pass" if job.state == "pass" else "fail"
        log.info("%s: %s %s: %s", job.node, job.kind, job.name, verdict)
        if self.policy.dry_run:
            return
        try:
            pods = job_pods(self.kube, self.namespace, job.name) if verdict == "fail" else []
            value = deepcheck.record(job.kind, verdict, now, pods)
            self.store(
                self.kube.patch_node(job.node, {"metadata": {"annotations": {names.DEEP_CHECK_ANNOTATION: value}}})
            )
            self.metrics.deep_checks.inc(pool=job.pool, kind=job.kind, verdict=verdict)
            self._delete(job)  # recorded: the Job has said what it had to
        except LeaseLost:
            raise
        except ApiError as error:  # recorded next round: the Job is still there
            self.metrics.api_errors.inc()
            log.warning("%s: sweep result not recorded yet: %s", job.node, error)

    def _start(self, node: dict[str, Any], now: float, request: Request | None = None) -> bool:
        """Create a sweep's Job, or the verification `request` asked for; whether it exists now."""
        name = node["metadata"]["name"]
        what = "sweep of idle node" if request is None else f"verification (asked by {request.namespace}) of"
        log.info("%s%s %s", "dry-run " * self.policy.dry_run, what, name)
        if self.policy.dry_run:
            return True  # planned and logged: done with, as far as a dry run goes
        try:
            self.kube.create(
                f"/apis/batch/v1/namespaces/{self.namespace}/jobs",
                deepcheck.sweep_job(node, self.policy, self.namespace, now, request),
            )
        except LeaseLost:
            raise
        except ApiError as error:
            if error.status != 409:
                self.metrics.api_errors.inc()
                log.warning("%s: %s not started: %s", name, "sweep" if request is None else "verification", error)
                return False
        return True

    def _delete(self, job: SweepJob) -> None:
        if self.policy.dry_run:
            return
        try:
            self.kube.delete(f"/apis/batch/v1/namespaces/{self.namespace}/jobs/{job.name}")
        except LeaseLost:
            raise
        except ApiError as error:
            self.metrics.api_errors.inc()
            log.warning("%s: sweep Job %s not deleted: %s", job.node, job.name, error)
