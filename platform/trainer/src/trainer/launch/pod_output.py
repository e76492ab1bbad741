"""A Ray actor's output on its pod's standard output, where `kubectl logs` and Cloud Logging read it.

Ray writes each worker process's stdout and stderr to files under /tmp/ray/session_latest/logs on the
pod's disk (gone with the pod). In a KubeRay pod the container's own standard output is PID 1's (the
`ray start --block` process), so a replica group's actor points its file descriptors 1 and 2 there:
Python's logging, torchft's Rust logs and anything else it prints reach the container log. Outside a
pod (a local Ray, the tests' cluster) nothing changes.
"""

from __future__ import annotations

import os
from pathlib import Path

CONTAINER_STDOUT = Path("/proc/1/fd/1")


def in_pod(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    return bool(environ.get("KUBERNETES_SERVICE_HOST"))


def to_pod_output(target: Path = CONTAINER_STDOUT) -> bool:
    """Send this process's fds 1 and 2 to ``target`` (the container's stdout); False when it cannot be opened."""
    try:
        fd = os.open(target, os.O_WRONLY | os.O_APPEND)
    except OSError:
        return False  # another user's PID 1, no /proc: the output stays in Ray's files
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return True
