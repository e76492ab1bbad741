"""Run a planned pod with podman, as the kubelet runs it: the I/O half of twin.pods.

Per pod: a network namespace (twin.network), a folder for its volumes, its init containers one after
the other (each must exit 0, else the pod fails with that container's termination message, as with
restartPolicy Never), then its containers detached. Pods and their containers are named
`<pod>_<container>` in podman, so a scenario can kill one container as a node failure would.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twin import engine, network, pods
from twin.engine import TwinError


@dataclass
class Exited:
    container: str
    code: int
    message: str  # the termination message, else (FallbackToLogsOnError) the log's tail


@dataclass
class RunningPod:
    name: str
    ip: str
    folder: Path
    containers: list[str] = field(default_factory=list)
    init: list[Exited] = field(default_factory=list)

    def podman_name(self, container: str) -> str:
        return f"{self.name}_{container}"


def image_config(reference: str) -> pods.ImageConfig:
    """ENTRYPOINT, CMD, ENV, WORKDIR and USER of a built image, from `podman image inspect`."""
    raw = engine.run(["image", "inspect", "--format", "{{json .Config}}", reference], check=False)
    if raw.returncode != 0:
        raise TwinError(f"twin: image {reference} is not built; run `meridian-twin build`")
    config: dict[str, Any] = json.loads(raw.stdout) or {}
    env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
    return pods.ImageConfig(
        entrypoint=tuple(config.get("Entrypoint") or ()),
        cmd=tuple(config.get("Cmd") or ()),
        env=env,
        workdir=config.get("WorkingDir") or "",
        user=config.get("User") or "",
    )


class Kubelet:
    """One node of the twin, running pods for scenarios; `close()` removes every container and namespace."""

    def __init__(self, root: Path, resolve_image: Callable[[str], str], hosts: dict[str, str] | None = None) -> None:
        self.root, self.resolve_image = root, resolve_image
        self.hosts: dict[str, str] = dict(hosts or {})  # name → address, in every container's /etc/hosts
        self.pods: dict[str, RunningPod] = {}
        self._next = 1

    def _exit(self, pod: RunningPod, container: str, timeout: float) -> int:
        name = pod.podman_name(container)
        proc = engine.run(["wait", name], check=False, timeout=timeout)
        if proc.returncode != 0:
            raise TwinError(f"podman wait {name}: {proc.stderr.strip()}")
        return int(proc.stdout.strip().splitlines()[-1])

    def logs(self, pod: RunningPod, container: str) -> str:
        proc = engine.run(["logs", pod.podman_name(container)], check=False)
        return proc.stdout + proc.stderr

    def wait(self, pod: RunningPod, container: str, timeout: float) -> int:
        """The container's exit code once it exits (TwinError after `timeout` seconds)."""
        try:
            return self._exit(pod, container, timeout)
        except Exception as exc:
            raise TwinError(f"pod {pod.name}: container {container} still running after {timeout:.0f} s") from exc

    def kill(self, pod: RunningPod, container: str) -> None:
        engine.run(["kill", "--signal", "KILL", pod.podman_name(container)], check=False)

    def delete(self, pod: RunningPod) -> None:
        for container in [*pod.containers, *(e.container for e in pod.init)]:
            engine.run(["rm", "--force", "--time", "0", pod.podman_name(container)], check=False)
        network.delete(pod.name)
        self.pods.pop(pod.name, None)

    def close(self) -> None:
        for pod in list(self.pods.values()):
            self.delete(pod)
        shutil.rmtree(self.root, ignore_errors=True)

    def wait_for(self, what: Callable[[], bool], timeout: float, why: str) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            if time.monotonic() > deadline:
                raise TwinError(f"twin: {why}: not after {timeout:.0f} s")
            time.sleep(0.5)
