"""The preflight init container gkr renders, run as the pod would run it, on a fake A3 Ultra node.

The rendered command and environment are used as they are; only the node differs: its
/usr/local/gib lives under a temporary root, and a `preflight` shim on PATH points the
checks at that root and at saved kernel-log and nvidia-smi outputs.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from contract import health
from gkr.submit import prepare
from tests.gkr.conftest import EXAMPLES, shipped
from tests.preflight.test_environment import node_tree

FIXTURES = Path(__file__).parent / "fixtures"
# What Google's set_nccl_env.sh exports that the nccl check looks for (a stand-in: the real script
# comes with the nccl-rdma-installer). It also sets NCCL_SOCKET_IFNAME, which the recipes override.
FAKE_SCRIPT = """\
export NCCL_NET=gIB NCCL_CROSS_NIC=0 NCCL_NET_GDR_LEVEL=PIX NCCL_IB_ADAPTIVE_ROUTING=1
export NCCL_SOCKET_IFNAME=eth0
export LD_LIBRARY_PATH=/usr/local/gib/lib64:$LD_LIBRARY_PATH
"""


def init_container(example: str) -> dict[str, Any]:
    _, objects = prepare(str(EXAMPLES / f"{example}.yaml"), {}, shipped(), None)
    (job,) = objects
    (container,) = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["initContainers"]
    return dict(container)


def run_as_the_pod(container: dict[str, Any], root: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    command = container["command"]
    script = command[2] if command[:2] == ["bash", "-c"] else shlex.join(command)
    script = script.replace("/usr/local/gib", f"{root}/usr/local/gib")
    assert container["terminationMessagePath"] == "/dev/termination-log"
    script = script.replace("/dev/termination-log", str(tmp_path / "termination-log"))  # the kubelet's file
    shim = tmp_path / "bin" / "preflight"
    shim.parent.mkdir()
    empty_log = tmp_path / "dmesg.txt"
    empty_log.write_text("")
    extra = f"--root {root} --kernel-log {empty_log} --nvidia-smi {FIXTURES / 'nvidia-smi-healthy.csv'} --min-shm-gib 0"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m preflight.cli "$@" {extra} --json\n')
    shim.chmod(0o755)
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    env["PATH"] = f"{shim.parent}:{env['PATH']}"
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    env["NODE_NAME"] = "gke-node-1"
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("example", ["pretrain-128-nodes", "flex-start-finetune"])  # multi-node jobs
def test_rendered_init_container_passes_nccl_on_a_good_node(tmp_path: Path, example: str) -> None:
    root = node_tree(tmp_path / "node")
    (root / "usr/local/gib/scripts").mkdir(parents=True)
    (root / "usr/local/gib/scripts/set_nccl_env.sh").write_text(FAKE_SCRIPT)
    result = run_as_the_pod(init_container(example), root, tmp_path)
    report = json.loads(result.stdout)
    checks = {c["name"]: (c["status"], c["summary"]) for c in report["checks"]}
    assert checks["nccl"] == ("pass", "NCCL 2.27.7 with the gIB plugin, NCCL_NET=gIB"), result.stderr
    assert result.returncode == 0, checks


def test_a_node_without_the_gib_script_fails_the_nccl_check_with_the_reason(tmp_path: Path) -> None:
    root = node_tree(tmp_path / "node")  # no set_nccl_env.sh: the installer did not run here
    result = run_as_the_pod(init_container("pretrain-128-nodes"), root, tmp_path)
    assert result.returncode == 1
    nccl = next(c for c in json.loads(result.stdout)["checks"] if c["name"] == "nccl")
    assert nccl["status"] == "fail"
    assert "source /usr/local/gib/scripts/set_nccl_env.sh" in nccl["summary"]
    # What Warden reads from the pod's status: the failing check, structured, with no Node patched.
    message = health.load_report((tmp_path / "termination-log").read_text(), "termination log")
    assert message.check == "nccl"
    assert message.summary == nccl["summary"]
    assert "--annotate" not in init_container("pretrain-128-nodes")["command"][2]
