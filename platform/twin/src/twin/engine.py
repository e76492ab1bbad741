"""Every podman call of the twin: one configuration, written by the twin, never the machine's own.

What works on this kind of machine (issue 37, tried): podman from Debian as root, the `runc` runtime (crun
refuses the machine's cgroups) and `default_ulimits = []` (podman's default nofile ulimit is above the
sandbox's hard limit). The configuration goes in the twin's state folder and reaches podman through
CONTAINERS_CONF, so nothing in /etc changes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

CONF = """\
# Written by the cluster twin (platform/twin/src/twin/podman.py); read through CONTAINERS_CONF.
[containers]
default_ulimits = []
[engine]
runtime = "runc"
"""


class TwinError(Exception):
    """One line for the person running the twin: where, what, how to fix."""


def state_dir() -> Path:
    """The twin's folder outside the repository (root file systems, pod folders): $MERIDIAN_TWIN_STATE."""
    return Path(os.environ.get("MERIDIAN_TWIN_STATE", "/var/tmp/meridian-twin"))


def environment() -> dict[str, str]:
    conf = state_dir() / "containers.conf"
    if not conf.is_file() or conf.read_text() != CONF:
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(CONF)
    return {**os.environ, "CONTAINERS_CONF": str(conf)}


def require_tools(*tools: str) -> None:
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        raise TwinError(
            f"twin: {', '.join(missing)} not found; run `make twin` (it installs Debian's podman, runc and debootstrap)"
        )
    if os.geteuid() != 0:
        raise TwinError(
            "twin: podman runs rootful here (rootless needs user namespaces this machine lacks); run as root"
        )


def run(
    args: Sequence[str],
    *,
    check: bool = True,
    timeout: float | None = None,
    stdin: bytes | None = None,
) -> subprocess.CompletedProcess[str]:
    """`podman ARGS` with the twin's configuration; a failure raises TwinError with podman's last line."""
    raw = subprocess.run(
        ["podman", *args],
        env=environment(),
        capture_output=True,
        timeout=timeout,
        input=stdin,  # bytes: an image's tar stream is not text
        check=False,
    )
    out = (raw.stdout or b"").decode(errors="replace")
    err = (raw.stderr or b"").decode(errors="replace")
    proc = subprocess.CompletedProcess(raw.args, raw.returncode, out, err)
    if check and proc.returncode != 0:
        last = (proc.stderr or proc.stdout or "").strip().splitlines()
        raise TwinError(f"podman {' '.join(args[:2])}: exit {proc.returncode}: {last[-1] if last else 'no output'}")
    return proc


def image_exists(ref: str) -> bool:
    return run(["image", "exists", ref], check=False).returncode == 0
