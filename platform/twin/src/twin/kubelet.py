"""Run a planned pod with podman, as the kubelet runs it: the I/O half of twin.pods.

Per pod: a network namespace (twin.network), a folder for its volumes, its init containers one after
the other (each must exit 0, else the pod fails with that container's termination message, as with
restartPolicy Never), then its containers detached. Pods and their containers are named
`<pod>_<container>` in podman, so a scenario can kill one container as a node failure would.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.names import ACCELERATOR_LABEL
from fleet.catalog import MACHINE_TYPES
from twin import dns, engine, network, pods
from twin.devices import RDMA_MTU
from twin.engine import TwinError
from twin.env import Node
from twin.podman import PodContext, podman_argv
from twin.probes import Probe
from twin.spec import Objects
from twin.volumes import HostPaths, VolumePlan

LABEL = "meridian.dev/twin"  # on every container the twin makes
MACHINE = Node(cpu="2", memory="24Gi")  # this machine: the node of a pod that asks for no accelerator


def node_for(pod: dict[str, Any]) -> Node:
    """The node the pod would land on: the fleet's machine with the accelerator it selects, else this machine.

    The shape is what the kubelet reports as allocatable (the downward API's limits, the size cap of a
    memory-backed emptyDir): a GPU pod's 64 GiB /dev/shm fits an a3-ultragpu-8g, not this machine.
    """
    accelerator = ((pod.get("spec") or {}).get("nodeSelector") or {}).get(ACCELERATOR_LABEL)
    for machine in MACHINE_TYPES.values():
        if accelerator and machine.gpu_type == accelerator:
            return Node(cpu=str(machine.vcpus), memory=f"{machine.memory_gb}G")
    return MACHINE


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
    containers: list[str] = field(default_factory=list)  # the app containers (and sidecars), started
    init: list[Exited] = field(default_factory=list)  # the init containers that ran to their end
    created: list[str] = field(default_factory=list)  # every container made in podman, for delete()
    plan: pods.PodPlan | None = None

    def podman_name(self, container: str) -> str:
        return f"{self.name}_{container}"


@functools.lru_cache(maxsize=32)
def image_config(reference: str) -> pods.ImageConfig:
    """ENTRYPOINT, CMD, ENV, WORKDIR and USER of a built image, from `podman image inspect`."""
    raw = engine.run(["image", "inspect", "--format", "{{json .Config}}", reference], check=False)
    if raw.returncode != 0:
        raise TwinError(f"twin: image {reference} is not built; run `meridian-twin build`")
    config: dict[str, Any] = json.loads(raw.stdout) or {}
    return pods.ImageConfig.from_inspect(config)


def _with_twin_images(pod: dict[str, Any], resolve: Callable[[str], str]) -> dict[str, Any]:
    """A copy of the pod whose every container names the twin's image for the rendered reference."""
    spec = dict(pod.get("spec") or {})
    for key in ("initContainers", "containers"):
        spec[key] = [{**c, "image": resolve(str(c.get("image", "")))} for c in spec.get(key) or []]
    return {**pod, "spec": spec}


def _materialize(volume: VolumePlan, folder: Path) -> str | None:
    """The host directory of a volume (None: a tmpfs each container mounts for itself)."""
    if volume.kind == "host":
        Path(volume.source).mkdir(parents=True, exist_ok=True)
        if volume.gid is not None:  # a CSI volume the driver mounts for the pod's fsGroup (twin.volumes)
            shutil.chown(volume.source, group=volume.gid)
            Path(volume.source).chmod(volume.mode)
        return volume.source
    if volume.kind == "tmpfs":
        return None
    root = folder / "volumes" / volume.name
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(volume.mode)
    for file in volume.files:
        target = root / file.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(file.data)
        target.chmod(file.mode)
    if volume.gid is not None:
        for path in [root, *root.rglob("*")]:
            shutil.chown(path, group=volume.gid)
    return str(root)


class Kubelet:
    """One node of the twin, running pods for scenarios; `close()` removes every container and namespace."""

    def __init__(self, root: Path, resolve_image: Callable[[str], str], objects: Objects, host: HostPaths) -> None:
        self.root, self.resolve_image, self.objects, self.host = root, resolve_image, objects, host
        self.pods: dict[str, RunningPod] = {}
        self._next = 1
        self._sweep()
        network.ensure_bridge()
        network.sweep()
        self.dns = dns.Server(str(network.GATEWAY))

    @staticmethod
    def _sweep() -> None:
        """Containers a killed earlier run left behind (they hold the pods' names), by the twin's label."""
        left = engine.run(["ps", "--all", "--quiet", "--filter", f"label={LABEL}"], check=False).stdout.split()
        if left:
            engine.run(["rm", "--force", "--time", "0", *left], check=False)

    def serve(self, names: dict[str, str], pod: RunningPod) -> None:
        """Service names (short, namespaced and FQDN, as KubeRay's Services) that resolve to the pod."""
        self.dns.records.update({name.lower(): pod.ip for name in names})

    def start(self, pod: dict[str, Any], *, devices: tuple[str, ...] = (), init_timeout: float = 600) -> RunningPod:
        """Plan the pod, give it an address, run its init containers in order, then start its containers.

        A failed init container stops there, as the kubelet does with restartPolicy Never: the result's
        `init` says which and with what message; no app container starts.
        """
        name = str(pod["metadata"]["name"])
        index, self._next = self._next, self._next + 1
        folder = self.root / name
        running = RunningPod(name, "", folder)
        self.pods[name] = running  # from here on, close() removes whatever was made
        ip = running.ip = network.create(name, index, devices, RDMA_MTU)
        placed = _with_twin_images(pod, self.resolve_image)
        placed["spec"] = {**placed["spec"], "nodeName": f"twin-node-{index}"}
        placed["status"] = {"podIP": ip, "hostIP": str(network.GATEWAY)}
        plan = pods.plan(placed, image_config, self.objects, self.host, node=node_for(placed))
        running.plan = plan
        folder.mkdir(parents=True, exist_ok=True)
        sources = {v.name: src for v in plan.volumes.values() if (src := _materialize(v, folder)) is not None}
        search = (f"{plan.namespace}.svc.cluster.local", "svc.cluster.local", "cluster.local")

        def context(c: pods.ContainerPlan) -> PodContext:
            log = folder / f"{c.name}.termination-log"
            log.write_text("")
            log.chmod(0o666)
            return PodContext(
                running.podman_name(c.name),
                f"ns:{network.namespace_path(name)}",
                str(log),
                sources,
                plan.hostname,
                plan.hosts,
                dns=str(network.GATEWAY),
                dns_search=search,
                dns_options=("ndots:5",),
            )

        for c in plan.init:
            engine.run(["run", "--label", LABEL, *podman_argv(c, context(c))[2:]])
            running.created.append(c.name)
            if c.sidecar:
                running.containers.append(c.name)
                continue
            code = self.wait(running, c.name, init_timeout)
            running.init.append(Exited(c.name, code, self._message(running, c)))
            if code != 0:
                return running
        # The kubelet restarts an exited container in place (same pod, same address) under Always, and a failed
        # one under OnFailure; podman's restart policy does the same (without the kubelet's back-off).
        restart = {"Always": ["--restart", "always"], "OnFailure": ["--restart", "on-failure"]}
        for c in plan.containers:
            engine.run(
                ["run", "--label", LABEL, *restart.get(plan.restart_policy, []), *podman_argv(c, context(c))[2:]]
            )
            running.created.append(c.name)
            running.containers.append(c.name)
        return running

    def _message(self, pod: RunningPod, c: pods.ContainerPlan) -> str:
        """The termination message: the file, else (FallbackToLogsOnError) the log's last 80 lines."""
        text = (pod.folder / f"{c.name}.termination-log").read_text(errors="replace").strip()
        if not text and c.termination_message_policy == "FallbackToLogsOnError":
            text = "\n".join(self.logs(pod, c.name).strip().splitlines()[-80:])
        return text

    def wait(self, pod: RunningPod, container: str, timeout: float) -> int:
        """The container's exit code once it exits (TwinError after `timeout` seconds)."""
        name = pod.podman_name(container)
        try:
            proc = engine.run(["wait", name], check=False, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TwinError(f"pod {pod.name}: container {container} still running after {timeout:.0f} s") from None
        if proc.returncode != 0:
            raise TwinError(f"podman wait {name}: {proc.stderr.strip()}")
        return int(proc.stdout.strip().splitlines()[-1])

    def logs(self, pod: RunningPod, container: str) -> str:
        proc = engine.run(["logs", pod.podman_name(container)], check=False)
        return proc.stdout + proc.stderr

    def crash(self, pod: RunningPod, container: str) -> None:
        """SIGKILL to the container's own process, as a crash or the OOM killer would: not a stop through
        podman, which would mark it stopped by the user and keep its restart policy from acting."""
        state = engine.run(["inspect", "--format", "{{.State.Pid}}", pod.podman_name(container)])
        os.kill(int(state.stdout.strip()), signal.SIGKILL)

    def ready(self, pod: RunningPod) -> bool:
        """Whether every container runs and passes its readiness probe now (one try each, as one period of the
        kubelet's prober); a container without a readiness probe is ready once it runs."""
        assert pod.plan is not None
        for c in pod.plan.containers:
            state = engine.run(["inspect", "--format", "{{.State.Status}}", pod.podman_name(c.name)], check=False)
            if state.stdout.strip() != "running":
                return False
            if c.readiness is not None and not self._passes(pod, c.name, c.readiness):
                return False
        return True

    def _passes(self, pod: RunningPod, container: str, probe: Probe) -> bool:
        timeout = max(1, probe.timeout_seconds)
        if probe.kind == "exec":
            argv = ["exec", pod.podman_name(container), *probe.command]
            try:
                return engine.run(argv, check=False, timeout=timeout + 5).returncode == 0
            except subprocess.TimeoutExpired:
                return False
        address = (probe.host or pod.ip, probe.port)
        try:
            if probe.kind == "httpGet":
                url = f"{probe.scheme.lower() or 'http'}://{address[0]}:{address[1]}{probe.path or '/'}"
                with urllib.request.urlopen(url, timeout=timeout) as response:
                    return bool(200 <= response.status < 400)
            if probe.kind == "tcpSocket":
                socket.create_connection(address, timeout=timeout).close()
                return True
        except (OSError, urllib.error.URLError):
            return False
        raise TwinError(f"pod {pod.name}: container {container}: {probe.kind} probes are not run by the twin")

    def restarts(self, pod: RunningPod, container: str) -> int:
        """How many times the container was restarted in place (the pod's restartCount)."""
        state = engine.run(["inspect", "--format", "{{.RestartCount}}", pod.podman_name(container)])
        return int(state.stdout.strip())

    def delete(self, pod: RunningPod) -> None:
        for container in pod.created:
            engine.run(["rm", "--force", "--time", "0", pod.podman_name(container)], check=False)
        network.delete(pod.name)
        self.pods.pop(pod.name, None)

    def close(self) -> None:
        for pod in list(self.pods.values()):
            self.delete(pod)
        self.dns.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def wait_for(self, what: Callable[[], bool], timeout: float, why: str) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            if time.monotonic() > deadline:
                raise TwinError(f"twin: {why}: not after {timeout:.0f} s")
            time.sleep(0.5)
