"""The device boundary, and only it: what a GKE A3 Ultra node gives a pod that this machine cannot.

- `/home/kubernetes/bin/nvidia` (the driver GKE installs, mounted at /usr/local/nvidia): an `nvidia-smi`
  that answers preflight's query for eight healthy H200 as the real one formats it, and the NCCL library's
  file name the driver install carries;
- `/home/kubernetes/bin/gib` (the gIB installer's output): the plugin's file name and a `set_nccl_env.sh`
  exporting the variables the real script sets (versions.md in shared/REFERENCE.md, cluster-toolkit's
  a3-ultragpu blueprint);
- the eight RDMA interfaces (eth2..eth9, MTU 8896) GKE's multi-networking adds, as dummy links in the
  pod's network namespace (twin.network).

Everything above the boundary (the pod's command, preflight's checks, the kernel log, /dev/shm) is real.
"""

from __future__ import annotations

from pathlib import Path

from contract import names
from preflight.environment import RDMA_INTERFACES, RDMA_MTU

H200_COUNT = 8
DRIVER = "570.124.06"
CUDA = "12.9"
NCCL_LIBRARY = "libnccl.so.2.27.7"
__all__ = ["RDMA_INTERFACES", "RDMA_MTU", "host_paths"]

_QUERY_HEADER = (
    "index, pci.bus_id, name, driver_version, ecc.errors.uncorrected.volatile.total, retired_pages.pending, "
    "remapped_rows.pending, remapped_rows.failure, clocks_event_reasons.active"
)
_GPU_LINE = "{i}, 00000000:{bus:02X}:00.0, NVIDIA H200, {driver}, 0, [N/A], No, No, 0x0000000000000000"

_NVIDIA_SMI = """#!/bin/sh
# The twin's nvidia-smi (platform/twin/src/twin/devices.py): eight healthy H200, no GPU behind them.
case "$*" in
  *--query-gpu=*) cat <<'EOF'
{table}
EOF
  ;;
  *) printf '| NVIDIA-SMI {driver}    Driver Version: {driver}    CUDA Version: {cuda}  |\\n' ;;
esac
"""

_SET_NCCL_ENV = """# The twin's gIB environment script: the variables the real set_nccl_env.sh exports on A3 Ultra.
export NCCL_NET=gIB
export NCCL_CROSS_NIC=0
export NCCL_NET_GDR_LEVEL=PIX
export NCCL_P2P_NET_CHUNKSIZE=131072
export NCCL_NVLS_CHUNKSIZE=524288
export NCCL_IB_ADAPTIVE_ROUTING=1
export NCCL_IB_QPS_PER_CONNECTION=4
export NCCL_IB_TC=52
export NCCL_IB_FIFO_TC=84
export NCCL_TUNER_CONFIG_PATH=/usr/local/gib/configs/tuner_config_a3u.txtpb
"""


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def host_paths(root: Path) -> dict[str, Path]:
    """The stand-in host folders under `root`, by the host path a rendered pod mounts."""
    nvidia, gib = root / "nvidia", root / "gib"
    table = "\n".join([_QUERY_HEADER, *(_GPU_LINE.format(i=i, bus=4 + i, driver=DRIVER) for i in range(H200_COUNT))])
    _write(nvidia / "bin/nvidia-smi", _NVIDIA_SMI.format(table=table, driver=DRIVER, cuda=CUDA), 0o755)
    _write(nvidia / "lib64" / NCCL_LIBRARY, "")
    _write(gib / "lib64/libnccl-net_internal.so", "")
    _write(gib / "lib64" / NCCL_LIBRARY, "")
    _write(gib / "scripts/set_nccl_env.sh", _SET_NCCL_ENV, 0o755)
    _write(gib / "configs/tuner_config_a3u.txtpb", "")
    return {names.NVIDIA_HOST_PATH: nvidia, names.GIB_HOST_PATH: gib}
