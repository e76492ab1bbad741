"""The twin's pod network: each pod in its own network namespace with its own address, as on GKE.

A Linux bridge (`BRIDGE`) stands in for the node's pod network; each pod gets a namespace named after it,
a veth pair into the bridge and the next address of `SUBNET`, so pods reach each other by address and two
pods may listen on the same port (KubeRay gives every Ray pod the same metrics and agent ports). Every
container of a pod joins that namespace (`podman run --network ns:...`), as containers of a pod share
one network namespace in Kubernetes. Names (Services, the pod's own) go into each container's /etc/hosts.
"""

from __future__ import annotations

import ipaddress
import subprocess
from pathlib import Path

from twin.engine import TwinError

BRIDGE = "meridian-twin0"
SUBNET = ipaddress.ip_network("10.213.0.0/16")
GATEWAY = next(SUBNET.hosts())


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise TwinError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc


def ensure_bridge() -> None:
    if _ip("link", "show", BRIDGE, check=False).returncode == 0:
        return
    _ip("link", "add", BRIDGE, "type", "bridge")
    _ip("addr", "add", f"{GATEWAY}/{SUBNET.prefixlen}", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")


def sweep() -> None:
    """The pods' links a killed earlier run left on the bridge: their addresses would answer twice."""
    listed = _ip("-o", "link", "show", "master", BRIDGE, check=False).stdout
    for line in listed.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name:
            _ip("link", "delete", name, check=False)


def namespace_path(name: str) -> Path:
    return Path("/run/netns") / name


def create(name: str, index: int, devices: tuple[str, ...] = (), mtu: int = 1500) -> str:
    """A namespace `name` with address number `index` of SUBNET and links `devices`; returns the address."""
    ensure_bridge()
    address = SUBNET.network_address + index + 1
    if address == GATEWAY or address not in SUBNET or address == SUBNET.broadcast_address:
        raise TwinError(f"twin network: pod number {index} is outside {SUBNET}")
    delete(name)
    host_end = f"mt{index}"
    _ip("link", "delete", host_end, check=False)  # left by a run that was killed before its cleanup
    _ip("netns", "add", name)
    _ip("link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", name)
    _ip("link", "set", host_end, "master", BRIDGE, "up")
    _ip("-n", name, "addr", "add", f"{address}/{SUBNET.prefixlen}", "dev", "eth0")
    _ip("-n", name, "link", "set", "eth0", "up")
    _ip("-n", name, "link", "set", "lo", "up")
    _ip("-n", name, "route", "add", "default", "via", str(GATEWAY))
    for number, device in enumerate(devices):
        # The device boundary: the RDMA NICs GKE's multi-networking adds. A veth pair inside the namespace
        # (this kernel has no dummy links); its peer is up, so the device's state is up, as a cabled NIC's.
        peer = f"twinpeer{number}"
        _ip("-n", name, "link", "add", device, "mtu", str(mtu), "type", "veth", "peer", "name", peer, "mtu", str(mtu))
        _ip("-n", name, "link", "set", peer, "up")
        _ip("-n", name, "link", "set", device, "up")
    return str(address)


def delete(name: str) -> None:
    """The namespace and its veth (the host end goes with it); nothing if it is not there."""
    if namespace_path(name).exists():
        _ip("netns", "delete", name, check=False)
