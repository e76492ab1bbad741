"""Environment checks: mounts, NCCL and the gIB plugin, RDMA interfaces, /dev/shm.

Every path is read under `root` (default `/`), so tests run them against a
fake tree of /sys, /proc and /usr/local.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from preflight.report import Result

RDMA_INTERFACES = tuple(f"eth{i}" for i in range(2, 10))  # eth2..eth9 on rdma-0..rdma-7
RDMA_MTU = 8896
GIB_DIR = "usr/local/gib"
NVIDIA_LIB_DIR = "usr/local/nvidia/lib64"
# What sourcing /usr/local/gib/scripts/set_nccl_env.sh exports, and what jobs must set.
REQUIRED_ENV = {"NCCL_NET": "gIB"}
GIB_ENV = ("NCCL_CROSS_NIC", "NCCL_NET_GDR_LEVEL", "NCCL_IB_ADAPTIVE_ROUTING")
MIN_SHM_BYTES = 64 * 2**30  # memory-backed /dev/shm for data loaders and NCCL


@dataclass(frozen=True)
class Settings:
    root: Path = Path("/")
    checkpoint_dir: str | None = None  # where the checkpoint bucket is mounted (GCS FUSE)
    rdma: bool = True  # the machine has RDMA NICs (A3 Ultra)
    min_shm_bytes: int = MIN_SHM_BYTES


def _under(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


def check_checkpoint_mount(settings: Settings) -> Result:
    if not settings.checkpoint_dir:
        return Result("checkpoint-mount", "skip", "no checkpoint mount configured (--checkpoint-dir)")
    directory = _under(settings.root, settings.checkpoint_dir)
    if not directory.is_dir():
        return Result("checkpoint-mount", "fail", f"{settings.checkpoint_dir} is not mounted", [str(directory)])
    probe = directory / f".preflight-{uuid.uuid4().hex}"
    try:
        probe.write_bytes(b"preflight")
        probe.unlink()
    except OSError as exc:
        return Result(
            "checkpoint-mount", "fail", f"{settings.checkpoint_dir} is not writable ({exc.strerror})", [str(exc)]
        )
    return Result("checkpoint-mount", "pass", f"{settings.checkpoint_dir} is mounted and writable")


def nccl_version(root: Path) -> str | None:
    """NCCL's version from the library file name (libnccl.so.2.21.5) in the NVIDIA or gIB lib folders."""
    for folder in (NVIDIA_LIB_DIR, f"{GIB_DIR}/lib64"):
        for path in sorted(_under(root, folder).glob("libnccl.so.*")) if _under(root, folder).is_dir() else []:
            if m := re.fullmatch(r"libnccl\.so\.(\d+\.\d+\.\d+)", path.name):
                return m[1]
    return None


def check_nccl(settings: Settings, env: Mapping[str, str]) -> Result:
    if not settings.rdma:
        return Result("nccl", "skip", "machine has no RDMA NICs")
    problems = []
    version = nccl_version(settings.root)
    if version is None:
        problems.append(f"no libnccl.so.X.Y.Z under /{NVIDIA_LIB_DIR} or /{GIB_DIR}/lib64")
    plugin = (
        sorted(_under(settings.root, f"{GIB_DIR}/lib64").glob("libnccl-net*.so"))
        if _under(settings.root, f"{GIB_DIR}/lib64").is_dir()
        else []
    )
    if not plugin:
        problems.append(
            f"the gIB plugin (libnccl-net*.so) is not in /{GIB_DIR}/lib64: is the nccl-rdma-installer DaemonSet running?"
        )
    for key, value in REQUIRED_ENV.items():
        if env.get(key) != value:
            problems.append(f"{key}={env.get(key, '(unset)')}, expected {value}")
    missing = [key for key in GIB_ENV if key not in env]
    if missing:
        problems.append(f"gIB environment not set ({', '.join(missing)}): source /{GIB_DIR}/scripts/set_nccl_env.sh")
    if "/usr/local/nvidia/lib64" not in env.get("LD_LIBRARY_PATH", "").split(":"):
        problems.append("LD_LIBRARY_PATH lacks /usr/local/nvidia/lib64")
    if problems:
        return Result("nccl", "fail", problems[0], problems)
    return Result("nccl", "pass", f"NCCL {version} with the gIB plugin, NCCL_NET=gIB")


def check_rdma_interfaces(settings: Settings) -> Result:
    if not settings.rdma:
        return Result("rdma-interfaces", "skip", "machine has no RDMA NICs")
    problems = []
    for name in RDMA_INTERFACES:
        device = _under(settings.root, f"sys/class/net/{name}")
        if not device.is_dir():
            problems.append(
                f"{name} is missing: the pod needs the networking.gke.io/interfaces annotation for rdma-0..7"
            )
            continue
        mtu = int((device / "mtu").read_text().strip() or 0)
        if mtu != RDMA_MTU:
            problems.append(f"{name} has MTU {mtu}, expected {RDMA_MTU}")
        state = (device / "operstate").read_text().strip() if (device / "operstate").is_file() else "unknown"
        if state not in ("up", "unknown"):
            problems.append(f"{name} is {state}")
    if problems:
        return Result("rdma-interfaces", "fail", problems[0], problems)
    return Result("rdma-interfaces", "pass", f"{len(RDMA_INTERFACES)} RDMA interfaces up with MTU {RDMA_MTU}")


def shm_bytes(root: Path) -> int | None:
    path = _under(root, "dev/shm")
    if not path.is_dir():
        return None
    stats = os.statvfs(path)
    return stats.f_blocks * stats.f_frsize


def check_shm(settings: Settings, size: int | None = None) -> Result:
    size = shm_bytes(settings.root) if size is None else size
    if size is None:
        return Result("shm", "fail", "/dev/shm is missing")
    gib = size / 2**30
    if size < settings.min_shm_bytes:
        need = settings.min_shm_bytes / 2**30
        return Result(
            "shm",
            "fail",
            f"/dev/shm holds {gib:.1f} GiB, at least {need:.0f} GiB needed: mount a memory-backed emptyDir there",
        )
    return Result("shm", "pass", f"/dev/shm holds {gib:.0f} GiB")
