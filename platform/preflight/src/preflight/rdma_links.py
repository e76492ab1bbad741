"""Per-NIC RDMA link state, from the kernel's InfiniBand sysfs class.

Each RDMA device is /sys/class/infiniband/<dev>/ports/<port>/ with `state` ("4: ACTIVE"),
`phys_state` ("5: LinkUp") and `rate` ("400 Gb/sec (4X NDR)"), as the kernel documents them
(Documentation/ABI/stable/sysfs-class-infiniband) and rdma-core's `ibstatus` prints them; RoCE
ports (A3 Ultra's) use the same files. An a3-ultragpu-8g has 8 ConnectX-7 NICs, one per GPU, at
400 Gb/s each (Compute Engine's A3 Ultra machine type; cluster-toolkit v1.44.1's release notes:
"8 NVIDIA H200 GPUs each with dedicated CX-7 networking with RDMA support via RoCE"; the fleet
catalog's `rdma_nics`). Reading is under `root`, so tests use a fake tree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from preflight.report import Result

NAME = "rdma-links"
SYSFS = "sys/class/infiniband"
EXPECTED_NICS = 8  # a3-ultragpu-8g: 8 CX-7 (catalog rdma_nics); --expect-rdma-nics for another machine
MIN_RATE_GBPS = 400.0  # each CX-7 link on A3 Ultra; --min-rdma-gbps for another machine
_RATE = re.compile(r"\s*(\d{1,6}(?:\.\d{1,3})?)\s*Gb/sec")
_MAX_READ = 256  # sysfs values are one short line; anything longer is not the kernel's


@dataclass(frozen=True)
class Port:
    device: str
    port: str
    state: str  # "ACTIVE", "DOWN", ... (the word after "N: ")
    phys_state: str  # "LinkUp", "Disabled", ...
    rate_gbps: float | None  # None: missing or unreadable


def _value(path: Path) -> str:
    try:
        with path.open("rb") as f:
            raw = f.read(_MAX_READ).decode("ascii", errors="replace")
    except OSError:
        return ""
    return " ".join(raw.split())


def _word(text: str) -> str:
    """ "4: ACTIVE" -> "ACTIVE"; anything else as it is ("" when missing)."""
    return text.split(":", 1)[1].strip() if ":" in text else text


def _rate(text: str) -> float | None:
    m = _RATE.match(text)
    return float(m[1]) if m else None


def read_ports(root: Path) -> list[Port] | None:
    """Every port of every RDMA device; None when the sysfs class is missing (no RDMA stack visible)."""
    base = root / SYSFS
    if not base.is_dir():
        return None
    ports = []
    for device in sorted(base.iterdir(), key=lambda p: p.name):
        folder = device / "ports"
        for port in sorted(folder.iterdir(), key=lambda p: p.name) if folder.is_dir() else []:
            ports.append(
                Port(
                    device.name,
                    port.name,
                    _word(_value(port / "state")),
                    _word(_value(port / "phys_state")),
                    _rate(_value(port / "rate")),
                )
            )
        if not folder.is_dir():
            ports.append(Port(device.name, "-", "", "", None))  # a device with no ports: counted, and down
    return ports


def judge(ports: list[Port] | None, expected_nics: int, min_rate_gbps: float) -> Result:
    """Pure: at least `expected_nics` devices, every port ACTIVE and LinkUp at `min_rate_gbps` or more."""
    if ports is None:
        return Result(
            NAME,
            "fail",
            f"no /{SYSFS}: no RDMA device is visible (expected {expected_nics}); "
            "does the pod have the rdma-0..7 networks and the RDMA devices?",
        )
    problems = []
    devices = sorted({p.device for p in ports})
    if len(devices) < expected_nics:
        problems.append(f"{len(devices)} RDMA device(s) visible, the machine has {expected_nics}")
    for p in ports:
        where = f"{p.device} port {p.port}"
        if p.state != "ACTIVE":
            problems.append(f"{where}: state {p.state or 'unreadable'}, expected ACTIVE")
        if p.phys_state != "LinkUp":
            problems.append(f"{where}: physical state {p.phys_state or 'unreadable'}, expected LinkUp")
        if p.rate_gbps is None:
            problems.append(f"{where}: rate unreadable, expected {min_rate_gbps:g} Gb/s")
        elif p.rate_gbps < min_rate_gbps:
            problems.append(f"{where}: rate {p.rate_gbps:g} Gb/s, below {min_rate_gbps:g} Gb/s")
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        return Result(NAME, "fail", problems[0] + more, problems)  # one problem a line: deep.failures
    return Result(
        NAME, "pass", f"{len(devices)} RDMA device(s), {len(ports)} port(s) ACTIVE/LinkUp at >= {min_rate_gbps:g} Gb/s"
    )


def check(root: Path, expected_nics: int, min_rate_gbps: float, rdma: bool = True) -> Result:
    if not rdma:
        return Result(NAME, "skip", "machine has no RDMA NICs")
    return judge(read_ports(root), expected_nics, min_rate_gbps)
