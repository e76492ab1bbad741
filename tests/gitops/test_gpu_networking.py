"""The gIB NCCL plugin installer, as built for every cluster, puts the plugin where GPU job pods look for it.

The installer's init container is run with /bin/sh against a fake node: every
absolute path in its script is moved under tmp_path, each volume mount is a
link to the fake host directory its hostPath names, and a fake
`/scripts/container_entry.sh` stands in for Google's (it unpacks the plugin
into /var/lib/gib, as the real image does). The host paths are then read back
through the mounts gkr gives GPU job pods.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fleet.gitops.check import ClusterTree
from fleet.gitops.validate import Finding
from fleet.model import Fleet
from gkr.render import NCCL_ENV_SCRIPT
from gkr.submit import prepare
from tests.gkr.conftest import EXAMPLES, shipped

Trees = dict[str, tuple[ClusterTree, list[Finding]]]
REGIONS = ["us-central1", "us-east4", "europe-west1"]
PAUSE = "gke.gcr.io/pause:3.8@sha256:880e63f94b145e46f1b1082bb71b85e21f16b99b180b9996407d61240ceb9830"
PLUGIN = "libnccl-net.so"

# What Google's image does on `install`: unpack the plugin, its env script and tuner configs into /var/lib/gib.
FAKE_ENTRY = """#!/bin/sh
set -e
echo "$@" > {root}/entry-args
mkdir -p {root}/var/lib/gib/lib64 {root}/var/lib/gib/scripts {root}/var/lib/gib/configs
echo plugin > {root}/var/lib/gib/lib64/{plugin}
echo 'export NCCL_NET=gIB' > {root}/var/lib/gib/scripts/set_nccl_env.sh
echo tuner > {root}/var/lib/gib/configs/tuner_config_a3u.txtpb
"""


def _installer(trees: Trees, region: str) -> dict[str, Any]:
    tree, _ = trees[region]
    return next(
        o
        for o in tree.apps["gpu-networking"]
        if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "nccl-rdma-installer"
    )


def _gpu_job_mounts() -> dict[str, str]:
    """mountPath -> hostPath of the hostPath volumes gkr gives an H200 worker pod."""
    _, objs = prepare(str(EXAMPLES / "pretrain-128-nodes.yaml"), {}, shipped(), None)
    (job,) = objs
    spec = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    hosts = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    return {m["mountPath"]: hosts[m["name"]] for m in spec["containers"][0]["volumeMounts"] if m["name"] in hosts}


def _run_on_fake_node(daemonset: dict[str, Any], root: Path) -> Path:
    """Run the init containers' commands; returns the fake host's root."""
    pod = daemonset["spec"]["template"]["spec"]
    host, container = root / "host", root / "container"
    volumes = {v["name"]: v["hostPath"] for v in pod["volumes"]}
    entry = container / "scripts" / "container_entry.sh"
    entry.parent.mkdir(parents=True)
    entry.write_text(FAKE_ENTRY.format(root=container, plugin=PLUGIN))
    entry.chmod(0o755)
    for init in pod["initContainers"]:
        for mount in init.get("volumeMounts", []):
            source = host / volumes[mount["name"]]["path"].lstrip("/")
            source.mkdir(parents=True, exist_ok=True)  # DirectoryOrCreate, or a directory the node already has
            target = container / mount["mountPath"].lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                target.symlink_to(source, target_is_directory=True)  # the bind mount
        argv = [*init.get("command", []), *init.get("args", [])]
        assert argv[:2] == ["/bin/sh", "-c"], argv
        script = re.sub(r"(?<=[\s'\"])/(?=\w)", f"{container}/", " " + argv[2])
        subprocess.run(["/bin/sh", "-c", script], check=True, capture_output=True, timeout=30)
    return host


@pytest.mark.parametrize("region", REGIONS)
def test_installer_puts_the_plugin_where_gpu_jobs_mount_it(trees: Trees, region: str, tmp_path: Path) -> None:
    host = _run_on_fake_node(_installer(trees, region), tmp_path)
    # Google's v1.1.1 manifest runs `install` alone (c-e-a commit 2da1c92f dropped --install-nccl).
    assert (tmp_path / "container" / "entry-args").read_text().split() == ["install"]
    mounts = _gpu_job_mounts()

    def on_host(path: str) -> Path:
        mount = max((m for m in mounts if path.startswith(m + "/")), key=len)
        return host / mounts[mount].lstrip("/") / path[len(mount) + 1 :]

    assert on_host(NCCL_ENV_SCRIPT).read_text().strip() == "export NCCL_NET=gIB"
    assert (on_host("/usr/local/nvidia/lib64") / PLUGIN).is_file()  # LD_LIBRARY_PATH of GPU containers
    assert (on_host("/usr/local/gib/lib64") / PLUGIN).is_file()
    assert on_host("/usr/local/gib/configs/tuner_config_a3u.txtpb").is_file()


@pytest.mark.parametrize("region", REGIONS)
def test_installer_matches_googles_a3_ultra_manifest(fleet: Fleet, trees: Trees, region: str) -> None:
    daemonset = _installer(trees, region)
    assert daemonset["metadata"]["namespace"] == "kube-system"
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["hostNetwork"] is True
    assert pod["hostPID"] is True
    assert pod["tolerations"] == [{"operator": "Exists"}]
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [
        {"key": "cloud.google.com/gke-accelerator", "operator": "In", "values": ["nvidia-h200-141gb"]}
    ]
    (init,) = pod["initContainers"]
    assert init["image"] == fleet.versions.nccl_installer_image
    assert init["securityContext"] == {"privileged": True}
    (pause,) = pod["containers"]
    assert pause["image"] == PAUSE
    assert {v["hostPath"]["path"] for v in pod["volumes"]} == {
        "/home/kubernetes/bin/nvidia/lib64",
        "/home/kubernetes/bin/gib",
    }
