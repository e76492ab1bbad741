"""Carrying out Warden's decisions on a real cluster: Kubernetes and Compute Engine calls.

The record is written to the Node first, then the commands run: a crash in
between leaves a record that says what was asked, and the state machine
re-asks only what provably did not happen (a reboot whose boot id never
changed). What a phase implies (cordoned and tainted, pods evicted, a
probation Job) is re-asserted every round, so a failed call is repaired by
the next round instead of being forgotten. In dry-run nothing is changed:
decisions are logged and counted.

One node's trouble stays that node's: any failure while acting on it (an API
error, a timeout, a dropped connection, a Node shaped unlike a Node) is
counted and logged, the node is left alone for a while (exponential backoff)
and the round goes on. Only LeaseLost stops the round: this replica may no
longer act at all.

A replacement's host report (reportHostAsFaulty) is one command; its answer,
the operation's name or Compute Engine's refusal, is written to the record
next, and the state machine recreates the VM once that operation is DONE
(warden.state; the service reads the operation each round).

Cordon, taint and uncordon patches carry the Node's resourceVersion: if
anyone changed the Node since Warden read it, the API server answers 409,
Warden re-reads it and tries again next round instead of overwriting a taint
list it has not seen. A node a person had cordoned stays cordoned when
Warden returns it.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from contract import health, names
from warden.deepcheck import BURN_IN_LEVEL, container, deep_command
from warden.gce import Compute, Instance, instance_of, operation_outcome
from warden.kube import ApiError, Kube, LeaseLost
from warden.metrics import WardenMetrics
from warden.nodecache import NodeCache
from warden.policy import Policy
from warden.ratelimit import Backoff
from warden.state import REPORT_REFUSED, REPORT_SENT, Decision, HostReport, Record, carried_out, is_operation

log = logging.getLogger(__package__)
TAINT = {"key": names.WARDEN_TAINT_KEY, "value": "quarantined", "effect": "NoSchedule"}
CORDONED = ("quarantined", "draining", "remediating", "probation", "held")
NVIDIA_HOST = names.NVIDIA_HOST_PATH  # where GKE installs the driver on the node


def probation_job_name(node: str, since: float) -> str:
    return f"warden-probation-{hashlib.sha256(node.encode()).hexdigest()[:8]}-{int(since)}"


def evictable(pod: dict[str, Any]) -> bool:
    """Pods a drain must move: not DaemonSet pods (they belong on every node), not static mirror pods."""
    meta = pod.get("metadata", {})
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        return False
    return not any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or [])


def uses_gpus(pod: dict[str, Any]) -> bool:
    containers = pod.get("spec", {}).get("containers") or []
    return any(names.GPU_RESOURCE in ((c.get("resources") or {}).get("limits") or {}) for c in containers)


def job_pods(kube: Kube, namespace: str, job: str) -> list[dict[str, Any]]:
    """The pods of one of Warden's Jobs (their termination messages say what failed)."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    return list(kube.request("GET", path, [("labelSelector", f"job-name={job}")]).get("items", []))


def is_cordoned(node: dict[str, Any]) -> bool:
    spec = node.get("spec", {})
    return bool(spec.get("unschedulable")) and any(t.get("key") == TAINT["key"] for t in spec.get("taints") or [])


class Actuator:
    def __init__(
        self,
        kube: Kube,
        compute: Compute,
        policy: Policy,
        cache: NodeCache,
        metrics: WardenMetrics,
        namespace: str = names.WARDEN_NAMESPACE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube, self.compute, self.policy, self.cache, self.metrics = kube, compute, policy, cache, metrics
        self.namespace, self.clock = namespace, clock
        self.backoff = Backoff(clock=clock)

    def _failed(self, name: str, stage: str, error: Exception) -> None:
        """Contain one node's failure: count it, back off from that node, let the round go on."""
        if isinstance(error, ApiError):
            self.metrics.api_errors.inc()
            if error.status == 409:
                # Someone changed the Node under us: read it again, decide again next round, no backoff.
                self.metrics.conflicts.inc()
                try:
                    fresh = self.kube.get(f"/api/v1/nodes/{name}")
                    if fresh is not None:
                        self.cache.store(fresh)
                except ApiError:
                    pass
                log.info("%s: changed by someone else; re-read, trying again next round", name)
                return
        else:
            self.metrics.node_errors.inc(stage=stage)
        wait = self.backoff.failed(name)
        log.warning("%s: %s (%s); leaving it for %.0fs", name, error, type(error).__name__, wait)

    # Decisions

    def apply(self, node: dict[str, Any], before: Record, decision: Decision, deep_check: str | None = None) -> None:
        """Carry out one decision; `deep_check` (the annotation of a burn-in that just finished) joins the record."""
        name = str(node["metadata"]["name"])
        dry = not carried_out(before, decision, self.policy)  # the fleet's act_on: only logged, or done
        if not dry and not self.backoff.ready(name):
            log.info("%s: backing off after failures; decided again next round", name)
            return  # nothing happened, so nothing is counted
        after = decision.record
        carried = "false" if dry else "true"
        if before.phase != after.phase:
            self.metrics.transitions.inc(from_phase=before.phase, to_phase=after.phase)
        for command in decision.commands:
            self.metrics.commands.inc(verb=command.verb, carried_out=carried)
        verbs = ", ".join(c.verb for c in decision.commands) or "-"
        log.info(
            "%s%s: %s -> %s (%s) [%s]",
            "dry-run " * dry,
            name,
            before.phase,
            after.phase,
            after.reason,
            verbs,
        )
        if dry:
            return
        try:
            labels, annotations = after.to_annotations()
            if deep_check is not None:
                annotations[names.DEEP_CHECK_ANNOTATION] = deep_check
            current = self.kube.patch_node(name, {"metadata": {"labels": labels, "annotations": annotations}})
            self.cache.store(current)
            if after.phase in CORDONED and not is_cordoned(current) and "cordon" not in verbs:
                self.cordon(current)  # an earlier cordon failed: every out-of-service phase implies it
            if before.phase != after.phase:
                left = before.phase == "healthy" and after.phase in ("suspect", "quarantined")
                told = health.NodeEvent(
                    change="left_healthy" if left else "other",
                    before=before.phase,
                    after=after.phase,
                    faults=health.parse_faults(after.reason) if left else (),
                )
                message = f"{before.phase} -> {after.phase}: {after.reason}"
                self.event(node, names.warden_phase_reason(after.phase), message, told)
            for command in decision.commands:
                self.run(current, after, command.verb, command.detail, before, command.record)
            self.backoff.succeeded(name)
        except LeaseLost:
            raise
        except Exception as error:  # one node's trouble must never end the round (DESIGN: hostile input)
            self._failed(name, "act", error)

    def run(
        self,
        node: dict[str, Any],
        record: Record,
        verb: str,
        detail: str,
        before: Record | None = None,
        told: health.NodeEvent | None = None,
    ) -> None:
        name = node["metadata"]["name"]
        if verb == "cordon":
            self.cordon(node)
        elif verb == "evict":
            self.evict(self.kube.pods_on(name))
        elif verb == "restart_pods":
            self.evict([p for p in self.kube.pods_on(name) if uses_gpus(p)])
        elif verb == "report_faulty":
            self.report_host(node, record, detail)
        elif verb in ("reboot", "replace"):
            self.compute_call(node, verb, detail)
        elif verb == "preflight":
            self.start_probation(node, record)
        elif verb == "uncordon":
            self.uncordon(node, keep_unschedulable=before is not None and before.person_cordon)
        elif verb == "event":
            self.event(node, names.WARDEN_ACTION_REASON, detail, told or health.NodeEvent(change="other"))

    @staticmethod
    def _instance(node: dict[str, Any], verb: str) -> Instance:
        instance = instance_of(node.get("spec", {}).get("providerID", ""))
        if instance is None:
            raise ApiError(0, verb, node["metadata"]["name"], "no gce:// providerID: not a GCE instance")
        return instance

    def report_host(self, node: dict[str, Any], record: Record, reason: str) -> None:
        """Report the host, then record what the recreate waits for: the operation, or Compute Engine's refusal.

        A 4xx answer is a refusal (INSTANCES_WITHOUT_RESERVATION_NOT_SUPPORTED, MACHINE_TYPE_NOT_SUPPORTED,
        RATE_LIMIT_EXCEEDED, ...): no operation runs, so the VM is recreated next round. No answer, or a 5xx,
        may have started one: the record keeps REPORT_SENT and the state machine's bound ends the wait.
        """
        name = str(node["metadata"]["name"])
        try:
            answer = self.compute.report_host_as_faulty(self._instance(node, "report_faulty"), reason)
            operation = str(answer.get("name", ""))
            report = operation if is_operation(operation) else REPORT_SENT  # unnamed: nothing to poll, the bound
        except ApiError as error:
            if not 400 <= error.status < 500:
                raise
            log.warning("%s: host report refused, recreating the VM without it: %s", name, error)
            report = REPORT_REFUSED
        _, annotations = replace(record, report=report).to_annotations()
        self.cache.store(self.kube.patch_node(name, {"metadata": {"annotations": annotations}}))

    def host_report(self, node: dict[str, Any], operation: str) -> HostReport:
        """The host report's operation as Compute Engine answers now (zoneOperations.get, no waiting)."""
        done, error = operation_outcome(self.compute.operation(self._instance(node, "report_faulty"), operation))
        if done and error:
            log.warning("%s: host report %s ended in error: %s", node["metadata"]["name"], operation, error)
        return HostReport(done=done, error=error)

    def compute_call(self, node: dict[str, Any], verb: str, reason: str) -> None:
        instance = self._instance(node, verb)
        if verb == "replace":
            log.info("%s: recreating the VM: %s", node["metadata"]["name"], reason)
            self.compute.recreate_in_group(self.compute.group_of(instance))
        elif names.MAINTENANCE_LABEL in (node["metadata"].get("labels") or {}):
            self.compute.perform_maintenance(instance)  # the reboot that also clears the pending host event
        else:
            self.compute.reset(instance)

    # What each phase implies, re-asserted every round

    def ensure(self, node: dict[str, Any], record: Record, pods: list[dict[str, Any]], probation: str | None) -> None:
        """`pods` (left on a draining node) and `probation` (its Job's result) as the round just read them."""
        if self.policy.dry_run or record.phase not in CORDONED:
            return
        name = str(node["metadata"]["name"])
        if not self.backoff.ready(name):
            return
        try:
            if not is_cordoned(node):
                self.cordon(node)
            if record.phase == "draining":
                self.evict(pods)
            # A joining node's burn-in waits for the pool's bound: the state machine starts it.
            if record.phase == "probation" and probation == "missing" and not record.burn_in:
                self.start_probation(node, record)
            self.backoff.succeeded(name)
        except LeaseLost:
            raise
        except Exception as error:  # one node's trouble must never end the round
            self._failed(name, "act", error)

    @staticmethod
    def _precondition(node: dict[str, Any]) -> dict[str, Any]:
        """The resourceVersion the patch was computed from: the API server refuses it (409) if the Node changed since."""
        version = str((node.get("metadata") or {}).get("resourceVersion") or "")
        return {"resourceVersion": version} if version else {}

    def cordon(self, node: dict[str, Any]) -> None:
        # A merge patch replaces the whole taint list, so it must be built from the Node as it is now.
        taints = [t for t in node.get("spec", {}).get("taints") or [] if t.get("key") != TAINT["key"]]
        patch: dict[str, Any] = {"spec": {"unschedulable": True, "taints": [*taints, TAINT]}}
        if meta := self._precondition(node):
            patch["metadata"] = meta
        self.cache.store(self.kube.patch_node(node["metadata"]["name"], patch))

    def uncordon(self, node: dict[str, Any], keep_unschedulable: bool = False) -> None:
        """Remove Warden's taint and cordon; a person's cordon (unschedulable before Warden came) stays."""
        name = node["metadata"]["name"]
        taints = [t for t in node.get("spec", {}).get("taints") or [] if t.get("key") != TAINT["key"]]
        spec: dict[str, Any] = {"taints": taints} if keep_unschedulable else {"unschedulable": False, "taints": taints}
        patch = {
            "metadata": {"annotations": {names.PREFLIGHT_FAILURE_ANNOTATION: None}, **self._precondition(node)},
            "spec": spec,
        }
        self.cache.store(self.kube.patch_node(name, patch))

    def pods(self, node: str) -> list[dict[str, Any]]:
        return [p for p in self.kube.pods_on(node) if evictable(p)]

    def evict(self, pods: list[dict[str, Any]]) -> None:
        """Ask the Eviction API for each pod a drain must move; one a PodDisruptionBudget refuses is asked next round."""
        for pod in pods:
            if evictable(pod) and not pod.get("metadata", {}).get("deletionTimestamp"):
                self.kube.evict(pod, int(self.policy.drain_grace_s))

    # Probation: preflight on the node itself, in a Job pinned to it

    def probation_job(self, node: dict[str, Any], record: Record) -> dict[str, Any]:
        name, pool = node["metadata"]["name"], (node["metadata"].get("labels") or {}).get(names.NODE_POOL_LABEL, "")
        gpus = str((node.get("status", {}).get("capacity") or {}).get(names.GPU_RESOURCE, "0"))
        quick = container(
            "preflight", self.policy.probation_image, ["preflight", "run", *self.policy.probation_args(pool)], gpus
        )
        # With burn-in, the quick checks first, then the deep check (DCGM level 3, NCCL across nodes, RDMA links).
        deep = container("deep-check", self.policy.probation_image, deep_command(BURN_IN_LEVEL), gpus)
        pod: dict[str, Any] = (
            {"initContainers": [quick], "containers": [deep]} if self.policy.burn_in else {"containers": [quick]}
        )
        deadline = max(1800, int(self.policy.deep_check_timeout_s)) if self.policy.burn_in else 1800
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": probation_job_name(name, record.since),
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/name": "warden-probation", "app.kubernetes.io/part-of": "meridian"},
                "annotations": {names.PROBATION_NODE_ANNOTATION: name},
            },
            "spec": {
                "backoffLimit": 0,
                "activeDeadlineSeconds": deadline,
                "ttlSecondsAfterFinished": 86400,
                "template": {
                    "metadata": {"labels": {"app.kubernetes.io/name": "warden-probation"}},
                    "spec": {
                        "nodeName": name,  # bypasses the scheduler, and with it the cordon
                        "restartPolicy": "Never",
                        "automountServiceAccountToken": False,
                        "tolerations": [{"operator": "Exists"}],
                        **pod,
                        "volumes": [{"name": "nvidia", "hostPath": {"path": NVIDIA_HOST}}],
                    },
                },
            },
        }

    def _job_path(self, name: str = "") -> str:
        return f"/apis/batch/v1/namespaces/{self.namespace}/jobs" + (f"/{name}" if name else "")

    def start_probation(self, node: dict[str, Any], record: Record) -> None:
        try:
            self.kube.create(self._job_path(), self.probation_job(node, record))
        except ApiError as error:
            if error.status != 409:  # already there: created before a restart
                raise

    def probation_result(self, node: str, record: Record) -> str | None:
        """pass, fail, missing, or None while it runs."""
        job = self.kube.get(self._job_path(probation_job_name(node, record.since)))
        if job is None:
            return "missing"
        status = job.get("status") or {}
        if status.get("succeeded"):
            return "pass"
        failed = any(c.get("type") == "Failed" and c.get("status") == "True" for c in status.get("conditions") or [])
        return "fail" if failed or status.get("failed") else None

    def job_pods(self, job: str) -> list[dict[str, Any]]:
        return job_pods(self.kube, self.namespace, job)

    # Events

    def event(self, node: dict[str, Any], reason: str, message: str, told: health.NodeEvent) -> None:
        """An Event about `node`: `message` for people, `told` (the same, typed) for gkr health and dashboards."""
        meta = node["metadata"]
        now = datetime.fromtimestamp(self.clock(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "generateName": f"{meta['name']}.warden-",
                "namespace": "default",
                "annotations": {names.NODE_EVENT_ANNOTATION: health.dump_event(told)},
            },
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": meta["name"], "uid": meta.get("uid", "")},
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if reason != names.WARDEN_HEALTHY_REASON else "Normal",
            "source": {"component": names.WARDEN_KSA},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": names.WARDEN_COMPONENT,
        }
        self.kube.create("/api/v1/namespaces/default/events", body)
