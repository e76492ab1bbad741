"""What the runbooks act on, built without a cluster: gkr's rendered jobs, the committed trees, the alerts' labels.

Pods: each example job gkr renders (`gkr submit --dry-run -o yaml`, in each region's kubeconfig context) expanded
to one pod per pod template, with the labels KubeRay, the Job controller or a Deployment add; and the pod
templates of the committed tree's Deployments and DaemonSets. An alert's labels for a pod are what GMP stores
for the trainer's series of that pod (the rendered ClusterPodMonitoring, tests/gitops/relabel.py), reduced to
the labels the alert's expression keeps (queries.alert_labels), plus the cluster's name GMP adds.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from contract import names
from contract.registry import Registry
from fleet.gitops.monitoring import queries, rules
from fleet.gitops.monitoring.scrape import trainer
from tests.gitops import relabel

Obj = dict[str, Any]
# One of each kind of run: one region under Ray, across regions, RL (two roles), a plain indexed Job.
JOB_EXAMPLES = ("pretrain-spares", "cross-region", "grpo-8b", "cpu-data-job")
RAY_NODE_TYPE = names.RAY_NODE_TYPE_LABEL


@dataclass(frozen=True)
class Pod:
    context: str
    obj: Obj
    owner: str  # the rendered object's kind/name it comes from

    @property
    def namespace(self) -> str:
        return str(self.obj["metadata"]["namespace"])

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.obj["metadata"].get("labels") or {})


@cache
def registry() -> Registry:
    from tests.gkr.conftest import shipped

    return shipped().registry


def contexts() -> dict[str, str]:
    """kubeconfig context -> the cluster's name (GMP's `cluster` label), for every region."""
    reg = registry()
    return {reg.context(r): r.cluster for r in reg.regions}


@cache
def rendered(example: str) -> tuple[tuple[str, Obj], ...]:
    """(context, object) for every object gkr would apply for the example, as its dry run prints them."""
    from tests.gkr.conftest import EXAMPLES, dry_run

    return dry_run("submit", "-f", str(EXAMPLES / f"{example}.yaml"), "-o", "yaml").objects


def _templates(o: Obj) -> list[tuple[str, Obj, dict[str, str]]]:
    """(pod name, pod template, labels its controller adds) of one workload object."""
    kind, name, spec = o["kind"], o["metadata"]["name"], o.get("spec") or {}
    if kind in ("RayJob", "RayCluster"):
        cluster = spec["rayClusterSpec"] if kind == "RayJob" else spec
        head = [(f"{name}-head", cluster["headGroupSpec"]["template"], {RAY_NODE_TYPE: "head"})]
        return head + [
            (
                f"{name}-{g['groupName']}-worker-0",
                g["template"],
                {RAY_NODE_TYPE: "worker", "ray.io/group": g["groupName"]},
            )
            for g in cluster.get("workerGroupSpecs") or []
        ]
    if kind == "Job":
        return [(f"{name}-0", spec["template"], {"batch.kubernetes.io/job-name": name, "job-name": name})]
    if kind in ("Deployment", "DaemonSet"):
        return [(f"{name}-0", spec["template"], {})]
    return []


def pods_of(context: str, o: Obj) -> list[Pod]:
    pods = []
    for name, template, added in _templates(o):
        meta = template.get("metadata") or {}
        labels = {**(meta.get("labels") or {}), **added}
        pod = {
            "metadata": {
                "name": name,
                "namespace": o["metadata"].get("namespace", ""),
                "labels": labels,
                "annotations": dict(meta.get("annotations") or {}),
            },
            "spec": {"nodeName": "gke-node-0"},
        }
        pods.append(Pod(context, pod, f"{o['kind']}/{o['metadata']['name']}"))
    return pods


def job_pods() -> list[Pod]:
    """Every pod of every example job, in the cluster it runs in."""
    return [p for example in JOB_EXAMPLES for context, o in rendered(example) for p in pods_of(context, o)]


def trainer_pods(job: str) -> list[Pod]:
    """The job's pods that export the trainer's series: scraped by the trainer monitor (no Ray head), not a
    run's Lighthouse (its own job)."""
    return [p for p in job_pods() if p.labels.get(names.JOB_LABEL) == job and p.labels.get(RAY_NODE_TYPE) != "head"]


def alert_labels(alert: rules.Alert, pod: Pod, run: str) -> dict[str, str]:
    """What the alert carries for one of the pod's series: its scraped labels that the expression keeps."""
    series = {"__name__": rules.LAST_COMMIT, "run": run, "region": "r", "group": "0"}  # a name the scrape keeps
    stored = relabel.scrape(trainer(), pod.obj, series)
    assert stored is not None, f"{pod.owner}: the trainer monitor does not keep its series"
    stored["cluster"] = contexts()[pod.context]
    kept = queries.alert_labels(alert.expr)
    assert kept is not None, f"{alert.name}: an alert must aggregate (a page reads its labels)"
    return {k: v for k, v in stored.items() if k in kept}


def job_of(pod: Pod) -> str:
    return pod.labels.get(names.JOB_LABEL, "")


def run_name(pod: Pod) -> str:
    """The run's name as the trainer reports it (`run.name=` in the job's command; RunMetrics' `run` label), the
    team's choice: the cpu example names each index's run apart from its job (`cpu-seed-sweep-$JOB_COMPLETION_INDEX`)."""
    kind, _, name = pod.owner.partition("/")
    for example in JOB_EXAMPLES:
        for context, o in rendered(example):
            if context == pod.context and (o["kind"], o["metadata"]["name"]) == (kind, name):
                found = re.search(r"run\.name=([^\s\"',\]]+)", json.dumps(o))
                return found.group(1).replace("$JOB_COMPLETION_INDEX", "0") if found else name
    return name
