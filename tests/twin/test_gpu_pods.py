"""A GPU worker of a gkr RayJob, run as the kubelet runs it, on a twin node with the device stand-ins.

Issue 37's first two findings: the preflight init container could not find `preflight` (its PATH replaced
the image's), and, run as the image's user, it held no CAP_SYSLOG to read the kernel log. Both are read here
from the containers' own exits and logs; the host's kernel has kernel.dmesg_restrict=1, as GKE's nodes do.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from preflight.environment import RDMA_INTERFACES
from tests.twin.conftest import golden
from twin import engine
from twin.kubelet import Kubelet, RunningPod
from twin.kuberay import rayjob_pods

pytestmark = pytest.mark.twin
NODE_CHECKS = ("kernel-log", "gpu-state", "nccl", "rdma-interfaces", "shm")


def _first_gpu_worker(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    job = rayjob_pods(golden(name))
    return job.cluster.head, next(iter(job.cluster.workers.values()))[0]


def test_dmesg_restrict_is_on_here() -> None:
    """What makes the SYSLOG finding observable: without it any user could read the log."""
    assert Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() == "1"


def test_a_gpu_worker_passes_preflight_and_joins_its_head(kubelet: Kubelet) -> None:
    head_pod, worker_pod = _first_gpu_worker("flex-start-finetune")
    head = kubelet.start(head_pod)
    kubelet.serve(dict(rayjob_pods(golden("flex-start-finetune")).services), head)
    worker = kubelet.start(worker_pod, devices=RDMA_INTERFACES, init_timeout=300)
    ran = {e.container: e for e in worker.init}
    assert ran["preflight"].code == 0, ran["preflight"].message
    log = kubelet.logs(worker, "preflight")
    for check in NODE_CHECKS:
        assert f"PASS  {check}:" in log, log
    assert ran["wait-gcs-ready"].code == 0, ran["wait-gcs-ready"].message
    # The raylet of the worker registered with the head's GCS: two alive nodes.
    kubelet.wait_for(lambda: _alive_nodes(kubelet, head) == 2, 120, "the GPU worker's raylet in the head's cluster")


def test_the_old_security_context_cannot_read_the_kernel_log(kubelet: Kubelet) -> None:
    """The same init container as the image's user with SYSLOG added: Kubernetes gives it no capability."""
    _, worker_pod = _first_gpu_worker("flex-start-finetune")
    pod = copy.deepcopy(worker_pod)
    preflight = pod["spec"]["initContainers"][0]
    preflight["securityContext"] = {"allowPrivilegeEscalation": False, "capabilities": {"add": ["SYSLOG"]}}
    pod["spec"]["initContainers"] = [preflight]
    worker = kubelet.start(pod, devices=RDMA_INTERFACES, init_timeout=300)
    assert worker.init[0].code != 0
    assert "ERROR kernel-log: cannot read the kernel log" in kubelet.logs(worker, "preflight")


def _alive_nodes(kubelet: Kubelet, head: RunningPod) -> int:
    proc = engine.run(
        [
            "exec",
            head.podman_name("ray-head"),
            "python",
            "-c",
            "import ray; ray.init(); print(sum(n['Alive'] for n in ray.nodes()))",
        ],
        check=False,
    )
    lines = proc.stdout.strip().splitlines()
    return int(lines[-1]) if proc.returncode == 0 and lines and lines[-1].isdigit() else 0
