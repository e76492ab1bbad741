"""Every Deployment, DaemonSet, StatefulSet and Job a cluster's overlays deploy, run as the kubelet would.

What the twin cannot run is named with the reason, and the list must match exactly: a new pod template
either runs here or says why not.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fleet.gitops.check import load_cluster
from tests.twin.conftest import REPO
from twin import engine, images
from twin.kubelet import Kubelet

pytestmark = pytest.mark.twin
CLUSTER = "meridian-us-central1"
WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "Job")
NOT_RUN = {
    ("warden", "Deployment", "warden"): "needs the Kubernetes API (in-cluster config): the twin runs no API server",
    ("warden", "DaemonSet", "warden-agent"): "privileged (reads /dev/kmsg) and needs the Kubernetes API",
    ("kube-system", "DaemonSet", "nccl-rdma-installer"): "Google's installer image: no registry here serves it",
}
UP_S = 15  # a long-running container still running this long after its start: it did not crash at start-up


def _workloads() -> list[tuple[tuple[str, str, str], dict[str, Any]]]:
    tree, _ = load_cluster(REPO, CLUSTER, str(Path(sys.executable).parent / "kubectl"))
    found = []
    for _, obj in tree.objects():
        if isinstance(obj, dict) and obj.get("kind") in WORKLOADS:
            meta = obj["metadata"]
            found.append(((meta.get("namespace", ""), obj["kind"], meta["name"]), obj))
    return found


def test_every_workload_runs_or_is_named_with_why_not(kubelet: Kubelet, built: set[str]) -> None:
    workloads = dict(_workloads())
    assert set(NOT_RUN) <= set(workloads), f"NOT_RUN names what the overlays lack: {set(NOT_RUN) - set(workloads)}"
    runnable = sorted(set(workloads) - set(NOT_RUN))
    assert runnable, "the overlays deploy nothing the twin runs"
    for key in runnable:
        _runs(kubelet, built, key, workloads[key])


def _runs(kubelet: Kubelet, built: set[str], key: tuple[str, str, str], obj: dict[str, Any]) -> None:
    """The workload's pod template as one pod: init containers succeed; a Job's containers exit 0, a
    long-running one is still running, never restarted, UP_S seconds after its start."""
    namespace, kind, name = key
    template = obj["spec"]["template"]
    for container in template["spec"].get("containers", []):
        assert images.image_name(container["image"], built), f"{key}: {container['image']} is not built by the twin"
    meta = {**template.get("metadata", {}), "name": f"{name}-twin", "namespace": namespace}
    running = kubelet.start({"metadata": meta, "spec": template["spec"]})
    assert all(e.code == 0 for e in running.init), (key, running.init)
    if kind == "Job":
        assert all(kubelet.wait(running, c, 300) == 0 for c in running.containers), key
        return
    time.sleep(UP_S)
    for container in running.containers:
        state = engine.run(
            ["inspect", "--format", "{{.State.Status}} {{.RestartCount}}", running.podman_name(container)]
        )
        assert state.stdout.split() == ["running", "0"], (key, kubelet.logs(running, container)[-2000:])
